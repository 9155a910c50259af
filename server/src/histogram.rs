//! A fixed-bucket latency histogram in the Prometheus exposition format,
//! shared by the REST request metrics and the in-flight limits.
//!
//! Hand-written: a dozen lines of counting and a few of text, where a
//! metrics crate would bring a registry the rest of `/metrics` does not use.

use std::fmt::Write as _;

/// Upper bounds of the latency buckets, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Cumulative bucket counts, count and sum of observed durations.
#[derive(Debug, Default, Clone)]
pub struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    /// Counts one observation of `secs` seconds.
    pub fn observe(&mut self, secs: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.buckets[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    /// Writes the `_bucket`, `_sum` and `_count` samples of metric `name`
    /// with `labels` (`key="value",...`, without braces; may be empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, n) in BUCKETS.iter().zip(self.buckets.iter()) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_rendered_with_labels() {
        let mut h = Histogram::default();
        h.observe(0.003);
        h.observe(0.3);
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "class=\"mutating\"");
        assert!(out.contains("x_seconds_bucket{class=\"mutating\",le=\"0.0025\"} 0\n"));
        assert!(out.contains("x_seconds_bucket{class=\"mutating\",le=\"0.005\"} 1\n"));
        assert!(out.contains("x_seconds_bucket{class=\"mutating\",le=\"0.5\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{class=\"mutating\",le=\"+Inf\"} 2\n"));
        assert!(out.contains("x_seconds_count{class=\"mutating\"} 2\n"));
        let mut bare = String::new();
        h.render(&mut bare, "y", "");
        assert!(bare.contains("y_bucket{le=\"10\"} 2\n"), "{bare}");
        assert!(bare.contains("y_sum{} 0.303\n"), "{bare}");
    }
}
