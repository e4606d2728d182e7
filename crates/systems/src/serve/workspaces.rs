//! The forward workspaces the inference thread keeps between batches: one per batch size in
//! use (making one costs allocations, on a GPU buffer creation), at most `cap` of them, the
//! least recently used dropped first. Without the cap, a client that sends every batch size
//! from 1 to the max batch would leave a workspace of each size behind: memory quadratic in the
//! max batch.

use gpulab_core::error::Result;

/// Workspaces the server keeps by default: the few sizes a steady load forms (1, the preferred
/// sizes, the max batch) stay; a stray size costs one allocation.
pub const DEFAULT_CAP: usize = 8;

pub struct Workspaces<W> {
    /// (rows, workspace, last use)
    slots: Vec<(usize, W, u64)>,
    clock: u64,
    cap: usize,
}

impl<W> Workspaces<W> {
    pub fn new(cap: usize) -> Self {
        Workspaces { slots: Vec::new(), clock: 0, cap: cap.max(1) }
    }

    /// The workspace for `rows`, made by `make` when none is kept (dropping the least recently
    /// used one first when `cap` are kept).
    pub fn get(&mut self, rows: usize, make: impl FnOnce(usize) -> Result<W>) -> Result<&mut W> {
        self.clock += 1;
        let i = match self.slots.iter().position(|s| s.0 == rows) {
            Some(i) => i,
            None => {
                if self.slots.len() >= self.cap {
                    let oldest = (0..self.slots.len()).min_by_key(|&i| self.slots[i].2).expect("cap is at least 1");
                    // Freed before the new one is made, so the peak stays at `cap` workspaces.
                    drop(self.slots.swap_remove(oldest));
                }
                self.slots.push((rows, make(rows)?, 0));
                self.slots.len() - 1
            }
        };
        self.slots[i].2 = self.clock;
        Ok(&mut self.slots[i].1)
    }

    /// How many are kept now.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_cap_and_drops_the_least_recently_used() {
        let mut made = Vec::new();
        let mut w = Workspaces::new(3);
        for rows in [1, 2, 3, 1, 4, 1, 2] {
            let got = *w
                .get(rows, |r| {
                    made.push(r);
                    Ok(r * 10)
                })
                .unwrap();
            assert_eq!(got, rows * 10);
            assert!(w.len() <= 3);
        }
        // 4 evicted 2 (1 had just been used); then 2 came back and evicted 3.
        assert_eq!(made, [1, 2, 3, 4, 2]);
    }

    #[test]
    fn a_failed_make_keeps_nothing_new() {
        let mut w: Workspaces<usize> = Workspaces::new(2);
        assert!(w.get(5, |_| Err(gpulab_core::error::Error::Internal("no memory".into()))).is_err());
        assert!(w.is_empty());
    }
}
