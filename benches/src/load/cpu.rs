//! CPU time and resident memory of processes, read from `/proc`: what a store's servers
//! (and the load generator) spent per request of a workload.
//!
//! On a machine where the servers and the client share the cores,
//! throughput is bounded by CPU per request, so this is the figure that
//! says where a store loses: in its leader, its followers, or the client.

use std::path::Path;

/// CPU seconds (user + system, every thread, live or exited) of process
/// `pid`, or `None` once it is gone.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds_from(&Path::new("/proc").join(pid.to_string()).join("stat"))
}

/// Resident set size of process `pid` in bytes, or `None` once it is gone.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The same for this process (the load generator).
pub fn own_cpu_seconds() -> Option<f64> {
    cpu_seconds_from(Path::new("/proc/self/stat"))
}

fn cpu_seconds_from(stat: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(stat).ok()?;
    let ticks = parse_stat_ticks(&text)?;
    Some(ticks as f64 / ticks_per_second())
}

/// `utime + stime` in clock ticks from one `/proc/<pid>/stat` line. The
/// command name (field 2) is in parentheses and may hold spaces or
/// parentheses itself, so fields are counted after its last `)`.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow; utime and stime are fields 14 and 15.
    let mut fields = after_name.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The kernel's `USER_HZ`, the unit of `/proc/<pid>/stat` times.
fn ticks_per_second() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => hz as f64,
        // USER_HZ is 100 on every architecture Linux exports /proc for
        // in practice; sysconf only fails on a broken libc.
        _ => 100.0,
    }
}

/// CPU seconds of a set of processes, one figure each, taken at one moment.
#[derive(Debug, Clone)]
pub struct CpuSample {
    servers: Vec<Option<f64>>,
    client: Option<f64>,
}

impl CpuSample {
    pub fn take(pids: &[u32]) -> Self {
        Self {
            servers: pids.iter().map(|p| process_cpu_seconds(*p)).collect(),
            client: own_cpu_seconds(),
        }
    }

    /// What each process spent from `self` to `later`.
    pub fn until(&self, later: &CpuSample) -> CpuSpent {
        let diff = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some((b - a).max(0.0)),
            _ => None,
        };
        CpuSpent {
            servers: self
                .servers
                .iter()
                .zip(&later.servers)
                .map(|(a, b)| diff(*a, *b))
                .collect(),
            client: diff(self.client, later.client),
        }
    }
}

/// CPU seconds spent over one workload.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CpuSpent {
    /// Per server process, in the order the pids were given (`None`: the
    /// process was gone when sampled).
    pub servers: Vec<Option<f64>>,
    /// The load generator (this process).
    pub client: Option<f64>,
}

impl CpuSpent {
    /// All servers together.
    pub fn servers_total(&self) -> f64 {
        self.servers.iter().flatten().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_are_found_after_a_command_name_with_spaces_and_parens() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime ...
        let line =
            "4242 (kube (store) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 269 0 0 20 0 9 0";
        assert_eq!(parse_stat_ticks(line), Some(1000));
        assert_eq!(parse_stat_ticks("4242 (short) S 1"), None);
        assert_eq!(parse_stat_ticks("no parens at all"), None);
    }

    #[test]
    fn this_process_cpu_time_grows_while_it_computes() {
        let before = own_cpu_seconds().expect("/proc/self/stat is readable");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut acc = 0u64;
        let mut after = before;
        while after <= before && std::time::Instant::now() < deadline {
            acc = (0..100_000u64).fold(acc, |a, b| a.wrapping_add(b * b));
            after = own_cpu_seconds().expect("/proc/self/stat is readable");
        }
        assert!(acc > 0);
        assert!(after > before, "no CPU time counted: {before} then {after}");
    }
}
