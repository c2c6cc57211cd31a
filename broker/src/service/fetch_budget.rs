//! How many bytes each partition of one Fetch may return, so the answer never exceeds
//! the smaller of the request's `max_bytes` and the broker's `--max-fetch-bytes`, summed
//! over all partitions. One exception, as in Kafka: the first batch of the first
//! partition that returns data comes whole even when it alone is larger, so a batch
//! bigger than every limit can still be read. Partitions that did not fit answer with no
//! records (and their offsets); the client asks for them again, rotating its partition
//! order so none starves (KIP-74's rule). Pure: the service reads with what it says.

use crate::log::ReadLimit;

/// What is left of one Fetch's byte budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchBudget {
    remaining: usize,
    broker_max: usize,
    returned_any: bool,
}

/// `requested` bytes, where 0 means "the broker's limit", capped at `limit`.
/// (Negative sizes are refused before this.)
fn capped(requested: i32, limit: usize) -> usize {
    match usize::try_from(requested) {
        Ok(n) if n > 0 => n.min(limit),
        _ => limit,
    }
}

impl FetchBudget {
    /// The budget of a Fetch asking for `request_max_bytes` from a broker whose limit is
    /// `broker_max_bytes`.
    pub fn new(request_max_bytes: i32, broker_max_bytes: usize) -> FetchBudget {
        FetchBudget {
            remaining: capped(request_max_bytes, broker_max_bytes),
            broker_max: broker_max_bytes,
            returned_any: false,
        }
    }

    /// The limit for the next partition, which asked for `partition_max_bytes`.
    pub fn next(&self, partition_max_bytes: i32) -> ReadLimit {
        ReadLimit {
            max_bytes: capped(partition_max_bytes, self.broker_max).min(self.remaining),
            min_one_batch: !self.returned_any,
        }
    }

    /// Records that a partition returned `bytes`.
    pub fn spend(&mut self, bytes: usize) {
        self.remaining = self.remaining.saturating_sub(bytes);
        self.returned_any |= bytes > 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `batches` (each partition's batch sizes, in order) the way the log does
    /// with the limits the budget gives; returns what each partition returned.
    fn serve(
        request_max: i32,
        broker_max: usize,
        partition_max: i32,
        partitions: &[Vec<usize>],
    ) -> Vec<usize> {
        let mut budget = FetchBudget::new(request_max, broker_max);
        partitions
            .iter()
            .map(|batches| {
                let limit = budget.next(partition_max);
                let mut taken = 0;
                for size in batches {
                    let first = taken == 0 && limit.min_one_batch;
                    if !first && taken + size > limit.max_bytes {
                        break;
                    }
                    taken += size;
                }
                budget.spend(taken);
                taken
            })
            .collect()
    }

    #[test]
    fn given_many_partitions_with_backlogs_then_the_answer_stays_within_the_smaller_limit() {
        // 60 partitions, each with 100 batches of 16 KiB; 1 MiB per partition asked.
        let backlog = vec![vec![16 * 1024; 100]; 60];
        let taken = serve(50 * 1024 * 1024, 8 * 1024 * 1024, 1024 * 1024, &backlog);
        assert_eq!(taken.iter().sum::<usize>(), 8 * 1024 * 1024);
        assert_eq!(&taken[..8], &[1024 * 1024; 8]);
        assert!(
            taken[8..].iter().all(|t| *t == 0),
            "the rest waits for the next fetch"
        );
        let smaller = serve(2 * 1024 * 1024, 8 * 1024 * 1024, 1024 * 1024, &backlog);
        assert_eq!(smaller.iter().sum::<usize>(), 2 * 1024 * 1024);
    }

    #[test]
    fn given_a_batch_larger_than_every_limit_then_it_alone_is_returned_whole() {
        let big = 3 * 1024 * 1024;
        let taken = serve(
            1024 * 1024,
            1024 * 1024,
            512 * 1024,
            &[vec![], vec![big, 10], vec![10]],
        );
        assert_eq!(
            taken,
            vec![0, big, 0],
            "only the first batch with data is exempt"
        );
    }

    #[test]
    fn given_a_partition_that_does_not_fit_then_a_later_smaller_one_still_may() {
        let taken = serve(100, 1000, 0, &[vec![60], vec![50], vec![40]]);
        assert_eq!(taken, vec![60, 0, 40]);
    }

    #[test]
    fn zero_means_the_brokers_limit() {
        let budget = FetchBudget::new(0, 4096);
        assert_eq!(
            budget.next(0),
            ReadLimit {
                max_bytes: 4096,
                min_one_batch: true
            }
        );
        assert_eq!(budget.next(100_000).max_bytes, 4096, "capped by the broker");
        assert_eq!(FetchBudget::new(i32::MAX, 4096).next(10).max_bytes, 10);
    }

    #[test]
    fn the_sum_never_exceeds_the_budget_but_for_the_first_batch_returned() {
        // Every mix of these batch sizes: the answer is within the budget, or it is
        // exactly the first batch of the first partition that returned data.
        let sizes = [1usize, 7, 30, 64, 100, 250];
        for request_max in [1i32, 50, 100, 300] {
            for partition_max in [0i32, 10, 80, 1000] {
                for a in sizes {
                    for b in sizes {
                        let partitions =
                            vec![vec![], vec![a, b], vec![b, a, a], vec![a], vec![b, b]];
                        let taken = serve(request_max, 200, partition_max, &partitions);
                        let total: usize = taken.iter().sum();
                        let budget = capped(request_max, 200);
                        let first = taken
                            .iter()
                            .position(|t| *t > 0)
                            .map_or(0, |i| partitions[i][0]);
                        assert!(
                            total <= budget || total == first,
                            "max {request_max}, per partition {partition_max}, sizes {a}/{b}: {taken:?}"
                        );
                    }
                }
            }
        }
    }
}
