//! Leader-epoch history of one replica's log: for every epoch, the offset of its first
//! batch. The leader uses it to tell a follower where an epoch ends in its log; the
//! follower cuts everything past that point (KIP-101), which removes exactly the tail
//! the new leader never had, without the data loss of truncating to a high watermark.

/// `(epoch, start offset)` pairs, epochs increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    entries: Vec<(i32, i64)>,
}

impl EpochHistory {
    /// Notes a batch of `epoch` appended at `base_offset`.
    pub fn record(&mut self, epoch: i32, base_offset: i64) {
        if epoch < 0 {
            return;
        }
        match self.entries.last() {
            Some((last, _)) if *last >= epoch => {}
            _ => self.entries.push((epoch, base_offset)),
        }
    }

    /// The epoch of the last batch, if any.
    pub fn latest(&self) -> Option<i32> {
        self.entries.last().map(|(epoch, _)| *epoch)
    }

    /// The largest epoch `<= epoch` and where it ends: the start of the next epoch, or
    /// `log_end` for the latest. `(-1, -1)` when the log holds no such epoch.
    pub fn end_of(&self, epoch: i32, log_end: i64) -> (i32, i64) {
        let Some(index) = self.entries.iter().rposition(|(e, _)| *e <= epoch) else {
            return (-1, -1);
        };
        let end = self
            .entries
            .get(index + 1)
            .map_or(log_end, |(_, start)| *start);
        (self.entries[index].0, end)
    }

    /// Forgets epochs that start at or after `offset` (the log was cut there).
    pub fn truncate_from(&mut self, offset: i64) {
        self.entries.retain(|(_, start)| *start < offset);
    }
}

/// Where a follower whose log ends at `local_end` must cut its log, given the leader's
/// answer `(epoch, end)` for the follower's latest epoch: nothing to cut (`None`) when
/// the leader's epoch ends at or past our end.
pub fn truncation_point(local_end: i64, leader_answer: (i32, i64)) -> Option<i64> {
    let (epoch, end) = leader_answer;
    if epoch < 0 {
        // The leader never had our epoch: nothing of it can stay.
        return Some(0).filter(|_| local_end > 0);
    }
    (end < local_end).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> EpochHistory {
        let mut h = EpochHistory::default();
        for (epoch, offset) in [(0, 0), (0, 5), (2, 10), (2, 12), (3, 20)] {
            h.record(epoch, offset);
        }
        h
    }

    #[test]
    fn epochs_are_recorded_at_their_first_batch() {
        let h = history();
        assert_eq!(h.entries, vec![(0, 0), (2, 10), (3, 20)]);
        assert_eq!(h.latest(), Some(3));
    }

    #[test]
    fn the_end_of_an_epoch_is_the_start_of_the_next_or_the_log_end() {
        let h = history();
        assert_eq!(h.end_of(0, 25), (0, 10));
        assert_eq!(
            h.end_of(1, 25),
            (0, 10),
            "epoch 1 never wrote: the largest below it"
        );
        assert_eq!(h.end_of(2, 25), (2, 20));
        assert_eq!(h.end_of(3, 25), (3, 25));
        assert_eq!(h.end_of(7, 25), (3, 25));
        assert_eq!(EpochHistory::default().end_of(0, 0), (-1, -1));
    }

    #[test]
    fn truncation_forgets_later_epochs() {
        let mut h = history();
        h.truncate_from(12);
        assert_eq!(h.entries, vec![(0, 0), (2, 10)]);
        h.truncate_from(10);
        assert_eq!(h.latest(), Some(0));
    }

    #[test]
    fn a_follower_cuts_only_what_the_leader_lacks() {
        // Divergent tail: we wrote offsets 10..14 in epoch 1, the new leader's epoch 1
        // ended at 10.
        assert_eq!(truncation_point(14, (1, 10)), Some(10));
        // The leader has at least everything we have.
        assert_eq!(truncation_point(14, (1, 14)), None);
        assert_eq!(truncation_point(14, (2, 30)), None);
        // The leader never had any of our epochs.
        assert_eq!(truncation_point(14, (-1, -1)), Some(0));
        assert_eq!(truncation_point(0, (-1, -1)), None);
    }
}
