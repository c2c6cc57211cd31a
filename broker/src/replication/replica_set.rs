//! A partition's replication state on one broker, as pure rules (no I/O, no clock of
//! its own). The leader tracks how far each follower has fetched; the high watermark
//! is the smallest log end among the in-sync replicas and never moves back; a follower
//! that has not caught up for longer than the lag limit leaves the ISR, and one that
//! reached the high watermark rejoins it.

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower { leader: i32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    log_end: i64,
    caught_up_at_ms: i64,
    /// Whether the last fetch started at the leader's log end.
    at_log_end: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSet {
    pub broker_id: i32,
    pub role: Role,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub min_insync_replicas: i32,
    /// When this broker became leader: followers get the lag limit from then on.
    led_since_ms: i64,
    /// Whether the catalog has spoken yet; the first word always starts a leadership.
    from_catalog: bool,
    followers: HashMap<i32, Progress>,
}

impl ReplicaSet {
    /// A partition with no other replica, led by `broker_id`.
    pub fn sole(broker_id: i32) -> Self {
        ReplicaSet {
            broker_id,
            role: Role::Leader,
            leader_epoch: 0,
            replicas: vec![broker_id],
            isr: vec![broker_id],
            min_insync_replicas: 1,
            led_since_ms: 0,
            from_catalog: false,
            followers: HashMap::new(),
        }
    }

    /// Applies the catalog's view. Follower progress survives only while this broker
    /// stays leader in the same epoch, and only for followers the new ISR still holds or
    /// never held: one taken out of the ISR (by this leader, or by itself after a restart
    /// that may have cost it its log's tail) rejoins on what it fetches from now on, not
    /// on how far it had fetched before.
    pub fn update(
        &mut self,
        role: Role,
        leader_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        min_insync_replicas: i32,
        now_ms: i64,
    ) {
        let same_leadership =
            self.from_catalog && self.role == role && self.leader_epoch == leader_epoch;
        self.from_catalog = true;
        if !same_leadership {
            self.followers.clear();
            self.led_since_ms = now_ms;
        } else {
            let left: Vec<i32> = self
                .isr
                .iter()
                .copied()
                .filter(|b| !isr.contains(b))
                .collect();
            self.followers.retain(|b, _| !left.contains(b));
        }
        self.role = role;
        self.leader_epoch = leader_epoch;
        self.replicas = replicas;
        self.isr = isr;
        self.min_insync_replicas = min_insync_replicas;
    }

    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// A follower fetched from `fetch_offset`: everything below it is on its log. Returns
    /// [`ReplicaSet::may_rejoin`] for it, read under the same borrow.
    pub fn record_fetch(
        &mut self,
        follower: i32,
        fetch_offset: i64,
        leader_log_end: i64,
        now_ms: i64,
    ) -> bool {
        let entry = self.followers.entry(follower).or_insert(Progress {
            log_end: fetch_offset,
            caught_up_at_ms: 0,
            at_log_end: false,
        });
        entry.log_end = fetch_offset;
        entry.at_log_end = fetch_offset >= leader_log_end;
        if entry.at_log_end {
            entry.caught_up_at_ms = now_ms;
        }
        self.may_rejoin(follower)
    }

    /// Whether `follower`, a replica outside the ISR, has just fetched from the leader's
    /// log end (so at or past the high watermark, which never passes the log end):
    /// [`ReplicaSet::isr_change`] would take it back now, so the leader should not wait
    /// for its next periodic check.
    pub fn may_rejoin(&self, follower: i32) -> bool {
        self.is_leader()
            && self.replicas.contains(&follower)
            && !self.isr.contains(&follower)
            && self.followers.get(&follower).is_some_and(|p| p.at_log_end)
    }

    /// The high watermark the leader may advertise given its own durable log end and
    /// `current`; an ISR follower that has not fetched yet holds it where it is.
    pub fn high_watermark(&self, local_end: i64, current: i64) -> i64 {
        let mut hw = local_end;
        for follower in self.isr.iter().filter(|b| **b != self.broker_id) {
            let reached = self.followers.get(follower).map_or(current, |p| p.log_end);
            hw = hw.min(reached);
        }
        hw.max(current)
    }

    /// The ISR the leader should publish now, if it differs from the current one.
    pub fn isr_change(
        &self,
        high_watermark: i64,
        now_ms: i64,
        lag_limit_ms: i64,
    ) -> Option<Vec<i32>> {
        if !self.is_leader() {
            return None;
        }
        let in_sync = |b: &i32| {
            if *b == self.broker_id {
                return true;
            }
            let last_caught_up = self.followers.get(b).map_or(self.led_since_ms, |p| {
                p.caught_up_at_ms.max(self.led_since_ms)
            });
            let was_in = self.isr.contains(b);
            let reached_hw = self
                .followers
                .get(b)
                .is_some_and(|p| p.log_end >= high_watermark);
            if was_in {
                now_ms - last_caught_up <= lag_limit_ms
            } else {
                reached_hw && now_ms - last_caught_up <= lag_limit_ms
            }
        };
        let next: Vec<i32> = self.replicas.iter().copied().filter(in_sync).collect();
        let mut current = self.isr.clone();
        current.sort_unstable();
        let mut sorted = next.clone();
        sorted.sort_unstable();
        (sorted != current).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader_of_three() -> ReplicaSet {
        let mut set = ReplicaSet::sole(1);
        set.update(Role::Leader, 0, vec![1, 2, 3], vec![1, 2, 3], 2, 1_000);
        set
    }

    #[test]
    fn high_watermark_is_the_smallest_isr_log_end_and_never_moves_back() {
        let mut set = leader_of_three();
        assert_eq!(
            set.high_watermark(10, 0),
            0,
            "followers have not fetched yet"
        );
        set.record_fetch(2, 7, 10, 1_100);
        assert_eq!(set.high_watermark(10, 0), 0, "follower 3 has not fetched");
        set.record_fetch(3, 5, 10, 1_100);
        assert_eq!(set.high_watermark(10, 0), 5);
        set.record_fetch(3, 10, 10, 1_200);
        assert_eq!(set.high_watermark(10, 5), 7);
        assert_eq!(
            set.high_watermark(6, 7),
            7,
            "the leader's own end bounds it, but it never moves back"
        );
    }

    #[test]
    fn a_follower_out_of_the_isr_does_not_hold_the_high_watermark() {
        let mut set = leader_of_three();
        set.update(Role::Leader, 0, vec![1, 2, 3], vec![1, 2], 2, 1_000);
        set.record_fetch(2, 9, 9, 1_100);
        assert_eq!(set.high_watermark(9, 0), 9);
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_and_rejoins_once_caught_up() {
        let mut set = leader_of_three();
        set.record_fetch(2, 10, 10, 1_500);
        set.record_fetch(3, 4, 10, 1_500);
        assert_eq!(
            set.isr_change(4, 1_900, 1_000),
            None,
            "within the lag limit"
        );
        set.record_fetch(2, 10, 10, 2_500);
        assert_eq!(
            set.isr_change(4, 2_600, 1_000),
            Some(vec![1, 2]),
            "3 never caught up since 1_000"
        );
        set.update(Role::Leader, 0, vec![1, 2, 3], vec![1, 2], 2, 2_600);
        set.record_fetch(3, 8, 10, 2_700);
        assert_eq!(
            set.isr_change(10, 2_700, 1_000),
            None,
            "below the high watermark"
        );
        set.record_fetch(3, 10, 10, 2_800);
        assert_eq!(set.isr_change(10, 2_800, 1_000), Some(vec![1, 2, 3]));
    }

    #[test]
    fn a_new_leadership_forgets_follower_progress_and_followers_change_nothing() {
        let mut set = leader_of_three();
        set.record_fetch(2, 10, 10, 1_100);
        set.update(Role::Leader, 1, vec![1, 2, 3], vec![1, 2, 3], 2, 5_000);
        assert_eq!(set.high_watermark(10, 3), 3);
        assert_eq!(
            set.isr_change(3, 5_500, 1_000),
            None,
            "the lag limit counts from the new leadership"
        );
        set.update(
            Role::Follower { leader: 2 },
            2,
            vec![1, 2, 3],
            vec![1, 2, 3],
            2,
            6_000,
        );
        assert_eq!(set.isr_change(3, 99_000, 1_000), None);
    }

    #[test]
    fn a_follower_taken_out_of_the_isr_rejoins_on_new_fetches_not_on_its_old_progress() {
        let mut set = leader_of_three();
        set.record_fetch(2, 10, 10, 1_100);
        set.record_fetch(3, 10, 10, 1_100);
        // Follower 2 restarted and left the ISR itself, its log maybe shorter now.
        set.update(Role::Leader, 0, vec![1, 2, 3], vec![1, 3], 2, 1_200);
        assert_eq!(
            set.isr_change(10, 1_300, 1_000),
            None,
            "the progress it had before its restart does not bring it back"
        );
        assert!(!set.may_rejoin(2));
        set.record_fetch(2, 6, 10, 1_400);
        assert!(!set.may_rejoin(2));
        assert_eq!(set.isr_change(10, 1_500, 1_000), None, "below the HW");
        set.record_fetch(2, 10, 10, 1_600);
        assert!(set.may_rejoin(2), "caught up: rejoin now");
        assert!(!set.may_rejoin(3), "3 is in the ISR already");
        assert_eq!(set.isr_change(10, 1_700, 1_000), Some(vec![1, 2, 3]));
    }

    #[test]
    fn the_first_catalog_view_starts_the_lag_clock_even_for_the_same_epoch() {
        // A restarted broker opens its partitions as sole leader at epoch 0, then learns
        // from the catalog that it leads epoch 0 with followers: they get the full limit.
        let mut set = ReplicaSet::sole(1);
        set.update(Role::Leader, 0, vec![1, 2], vec![1, 2], 1, 50_000);
        assert_eq!(set.isr_change(0, 50_900, 1_000), None);
        assert_eq!(set.isr_change(0, 51_100, 1_000), Some(vec![1]));
    }
}
