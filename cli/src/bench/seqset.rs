//! A set of one producer's sequence numbers, as a bitmap: sequences are dense from 0,
//! so a million records cost 128 KiB, and membership is what verification asks most.

use std::ops::Range;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqSet {
    words: Vec<u64>,
    len: u64,
}

impl SeqSet {
    /// Adds `seq`; false if it was already there.
    pub fn insert(&mut self, seq: u64) -> bool {
        let (word, bit) = position(seq);
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let fresh = self.words[word] & bit == 0;
        self.words[word] |= bit;
        self.len += u64::from(fresh);
        fresh
    }

    pub fn insert_range(&mut self, range: Range<u64>) {
        for seq in range {
            self.insert(seq);
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// How many members of `self` are not in `other`.
    pub fn count_missing_from(&self, other: &SeqSet) -> u64 {
        self.words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let theirs = other.words.get(i).copied().unwrap_or(0);
                u64::from((w & !theirs).count_ones())
            })
            .sum()
    }
}

fn position(seq: u64) -> (usize, u64) {
    ((seq / 64) as usize, 1u64 << (seq % 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_count_once_and_differences_count_members() {
        let mut a = SeqSet::default();
        assert!(a.insert(3));
        assert!(!a.insert(3));
        a.insert_range(60..70);
        assert_eq!(a.len(), 11);
        assert!(!a.insert(64) && a.insert(1_000_000));
        assert_eq!(a.len(), 12);
        let mut b = SeqSet::default();
        b.insert_range(0..65);
        assert_eq!(a.count_missing_from(&b), 6);
        assert_eq!(b.count_missing_from(&a), 65 - 6);
    }
}
