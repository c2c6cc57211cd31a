//! Where a DeleteRecords moves a partition's log start, decided whole before anything
//! moves (pure): never back, never past the high watermark, never past the last stable
//! offset (the records of a transaction still open stay until it ends). Offset -1 means
//! "everything that may go now": the last stable offset, which is the high watermark
//! when no transaction is open.

/// DeleteRecords offset meaning "as far as possible" (Kafka: the high watermark).
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// Why a DeleteRecords offset is refused; nothing moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeleteRecordsRefusal {
    #[error("offset {offset} is not an offset: use one at least 0, or -1 for the high watermark")]
    Negative { offset: i64 },
    #[error("offset {offset} is above the high watermark {high_watermark}: only replicated records can be deleted")]
    AboveHighWatermark { offset: i64, high_watermark: i64 },
    #[error("offset {offset} is above the last stable offset {last_stable_offset}, where a transaction still open starts; delete up to {last_stable_offset}, or retry once the transaction ends")]
    InOpenTransaction {
        offset: i64,
        last_stable_offset: i64,
    },
}

/// Where a DeleteRecords to `requested` moves the log start: `Ok(start)`, never below
/// `log_start` (asking for less than what is already gone changes nothing), or why not.
pub fn delete_target(
    requested: i64,
    log_start: i64,
    high_watermark: i64,
    last_stable_offset: i64,
) -> Result<i64, DeleteRecordsRefusal> {
    let offset = match requested {
        DELETE_TO_HIGH_WATERMARK => last_stable_offset,
        n if n < 0 => return Err(DeleteRecordsRefusal::Negative { offset: n }),
        n if n > high_watermark => {
            return Err(DeleteRecordsRefusal::AboveHighWatermark {
                offset: n,
                high_watermark,
            })
        }
        n if n > last_stable_offset => {
            return Err(DeleteRecordsRefusal::InOpenTransaction {
                offset: n,
                last_stable_offset,
            })
        }
        n => n,
    };
    Ok(offset.max(log_start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_an_offset_within_the_stable_log_then_the_start_moves_there() {
        assert_eq!(delete_target(5, 0, 10, 10), Ok(5));
        assert_eq!(
            delete_target(10, 0, 10, 10),
            Ok(10),
            "up to the high watermark"
        );
        assert_eq!(delete_target(0, 0, 10, 10), Ok(0));
    }

    #[test]
    fn given_an_offset_below_the_start_then_nothing_moves_back() {
        assert_eq!(delete_target(3, 7, 10, 10), Ok(7));
    }

    #[test]
    fn given_minus_one_then_the_start_moves_to_the_last_stable_offset() {
        assert_eq!(delete_target(-1, 0, 10, 10), Ok(10));
        assert_eq!(
            delete_target(-1, 0, 10, 6),
            Ok(6),
            "an open transaction stays"
        );
        assert_eq!(delete_target(-1, 8, 10, 6), Ok(8), "never back");
    }

    #[test]
    fn given_an_offset_past_what_may_go_then_it_is_refused_naming_the_bound() {
        assert_eq!(
            delete_target(11, 0, 10, 10),
            Err(DeleteRecordsRefusal::AboveHighWatermark {
                offset: 11,
                high_watermark: 10
            })
        );
        assert_eq!(
            delete_target(8, 0, 10, 6),
            Err(DeleteRecordsRefusal::InOpenTransaction {
                offset: 8,
                last_stable_offset: 6
            })
        );
        for n in [-2, i64::MIN] {
            assert_eq!(
                delete_target(n, 0, 10, 10),
                Err(DeleteRecordsRefusal::Negative { offset: n })
            );
        }
        let message = delete_target(8, 0, 10, 6).expect_err("refused").to_string();
        assert!(message.contains("last stable offset 6"), "{message}");
    }
}
