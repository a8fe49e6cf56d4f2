//! The best `k` of a stream of scored rows, kept in a bounded heap: what the embedded store's
//! exact scan keeps while it scores every row.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A heap entry ordered so that the heap's top is the worst of the best `k`.
pub(crate) struct Worst(pub(crate) f32, pub(crate) usize);

impl PartialEq for Worst {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: the lowest score is the greatest, so it sits on top to be evicted.
        o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
    }
}

/// The best `k` (score, row) pairs of a stream.
pub(crate) struct TopK {
    k: usize,
    pub(crate) heap: BinaryHeap<Worst>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, score: f32, row: usize) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(score, row));
        } else if let Some(worst) = self.heap.peek()
            && score > worst.0
        {
            self.heap.pop();
            self.heap.push(Worst(score, row));
        }
    }

    pub(crate) fn into_sorted(self) -> Vec<(f32, usize)> {
        // `into_sorted_vec` is ascending by `Ord`, i.e. best score first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Worst(s, r)| (s, r))
            .collect()
    }
}
