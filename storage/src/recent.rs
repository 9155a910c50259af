//! The newest items of a log numbered without gaps (log entries by index,
//! events by revision), kept in memory within a byte budget: the shared
//! mechanism behind the log store's recent entries and the state
//! machine's recent events.
//!
//! Invariant: a [`RecentRun`] holds a contiguous run of numbers, oldest
//! dropped first once its items' sizes exceed the budget (the newest is
//! always kept). An item that does not follow the last starts the run
//! again; a truncation cuts it back from the end.

use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct RecentRun<T> {
    /// Each item with its number and its size.
    items: VecDeque<(u64, T, usize)>,
    bytes: usize,
    budget: usize,
}

impl<T> RecentRun<T> {
    /// An empty run that keeps at most `budget` bytes of items.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            items: VecDeque::new(),
            bytes: 0,
            budget,
        }
    }

    /// Whether an item numbered `n` continues the run (an empty run is
    /// continued by anything).
    pub(crate) fn follows(&self, n: u64) -> bool {
        match self.items.back() {
            Some((last, _, _)) => last.checked_add(1) == Some(n),
            None => true,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.bytes = 0;
    }

    /// Adds item `n` of `size` bytes, starting the run again if it does
    /// not follow, and drops the oldest past the budget.
    pub(crate) fn push(&mut self, n: u64, item: T, size: usize) {
        if !self.follows(n) {
            self.clear();
        }
        self.bytes += size;
        self.items.push_back((n, item, size));
        while self.bytes > self.budget && self.items.len() > 1 {
            if let Some((_, _, dropped)) = self.items.pop_front() {
                self.bytes -= dropped;
            }
        }
    }

    /// Drops the items numbered `n` and after.
    pub(crate) fn truncate_from(&mut self, n: u64) {
        while self.items.back().is_some_and(|(last, _, _)| *last >= n) {
            if let Some((_, _, dropped)) = self.items.pop_back() {
                self.bytes -= dropped;
            }
        }
    }

    /// The number of the newest item.
    pub(crate) fn last(&self) -> Option<u64> {
        self.items.back().map(|(n, _, _)| *n)
    }

    /// The items `start..end` (`None`: to the newest), if the run holds
    /// every one of them: `start` is in the run or just after it, and so
    /// is `end`. `None` otherwise.
    pub(crate) fn range(
        &self,
        start: u64,
        end: Option<u64>,
    ) -> Option<impl Iterator<Item = (u64, &T)>> {
        let first = self.items.front()?.0;
        let after_last = first + self.items.len() as u64;
        if start < first || start > after_last || end.is_some_and(|e| e > after_last) {
            return None;
        }
        let take = end.map_or(usize::MAX, |e| {
            usize::try_from(e.saturating_sub(start)).unwrap_or(usize::MAX)
        });
        let skip = usize::try_from(start - first).ok()?;
        Some(
            self.items
                .iter()
                .skip(skip)
                .take(take)
                .map(|(n, item, _)| (*n, item)),
        )
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}
