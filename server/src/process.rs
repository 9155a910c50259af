//! Settings of the whole `kubestore serve` process, as opposed to one
//! node's: tests run several nodes in one process, so nothing here is
//! applied by [`RunningNode`](crate::RunningNode); the binary applies it
//! once, before it starts the node.

/// Whether the kernel may back this process's anonymous memory with
/// transparent huge pages (Linux's `PR_SET_THP_DISABLE`, which holds for
/// the whole process and is inherited by its children).
///
/// The allocator (mimalloc) asks for huge pages on every region it maps.
/// With the kernel in its common `madvise` mode a node's resident memory
/// then grows in 2 MiB steps: 12-15% more resident memory for the same
/// work, and an idle watch measured 16-22 KiB of it instead of 5.2-5.7 KiB
/// (BENCHMARKS.md, "Watch fan-out"). CPU per write did not move
/// measurably either way, so nodes run without them unless
/// `--transparent-huge-pages` asks.
#[cfg(target_os = "linux")]
pub fn set_transparent_huge_pages(allowed: bool) -> std::io::Result<()> {
    nix::sys::prctl::set_thp_disable(!allowed).map_err(std::io::Error::from)
}

/// Elsewhere there is nothing to set.
#[cfg(not(target_os = "linux"))]
pub fn set_transparent_huge_pages(_allowed: bool) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_setting_reaches_the_kernel_both_ways() {
        let found = nix::sys::prctl::get_thp_disable().expect("read");
        set_transparent_huge_pages(false).expect("disable");
        assert!(nix::sys::prctl::get_thp_disable().expect("read"));
        set_transparent_huge_pages(true).expect("enable");
        assert!(!nix::sys::prctl::get_thp_disable().expect("read"));
        set_transparent_huge_pages(!found).expect("restore");
    }
}
