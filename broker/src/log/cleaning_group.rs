//! Which consecutive sealed segments the cleaner writes into one output segment: the
//! next segment joins the current output while the output cannot outgrow `segment.bytes`
//! and its offsets stay within the `u32` reach of the segment index. Without merging,
//! every sealed segment keeps at least one filler and its files, so a compacted log would
//! grow with its history instead of with its live keys. Pure.
//!
//! The bound uses the joining segment's size before cleaning: cleaning never makes a
//! segment larger (a record goes or stays, a removed batch becomes at most one 61-byte
//! filler, or joins the filler before it), so the output cannot pass the bound.

use idem_proto::batch::HEADER_LEN;

/// The output segment written so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupOutput {
    pub base_offset: i64,
    /// Bytes written so far.
    pub bytes: u64,
    /// A run of removed batches not yet written (it becomes one filler header).
    pub pending_filler: bool,
}

/// A sealed segment before cleaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentShape {
    pub size: u64,
    pub next_offset: i64,
}

/// Whether `next` is cleaned into `output` rather than starting an output of its own.
pub(crate) fn joins(output: GroupOutput, next: SegmentShape, max_bytes: u64) -> bool {
    let pending = if output.pending_filler {
        HEADER_LEN as u64
    } else {
        0
    };
    let fits_bytes = output.bytes + pending + next.size <= max_bytes;
    let fits_index = next.next_offset - 1 - output.base_offset <= i64::from(u32::MAX);
    fits_bytes && fits_index
}

/// Whether cleaning `segments` (consecutive, as they are now) would merge any: grouped
/// by [`joins`] with each counted at its present size, some group has two. A pass writes
/// at most that much, so its groups reach at least as far: when this says yes, a pass
/// merges something, and repeating passes ends.
pub(crate) fn would_merge(segments: &[(i64, SegmentShape)], max_bytes: u64) -> bool {
    let mut current: Option<GroupOutput> = None;
    for &(base_offset, shape) in segments {
        match current.as_mut() {
            Some(output) if joins(*output, shape, max_bytes) => return true,
            _ => {
                current = Some(GroupOutput {
                    base_offset,
                    bytes: shape.size,
                    pending_filler: false,
                });
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cleaned_segments_that_fit_together_would_merge() {
        let shape = |size, next_offset| SegmentShape { size, next_offset };
        let small = [(0, shape(300, 10)), (10, shape(300, 20))];
        assert!(would_merge(&small, 1000));
        let full = [
            (0, shape(800, 10)),
            (10, shape(300, 20)),
            (20, shape(800, 30)),
        ];
        assert!(!would_merge(&full, 1000));
        assert!(!would_merge(&small[..1], 1000));
    }

    fn output(base_offset: i64, bytes: u64) -> GroupOutput {
        GroupOutput {
            base_offset,
            bytes,
            pending_filler: false,
        }
    }

    #[test]
    fn a_segment_joins_while_the_output_stays_within_segment_bytes() {
        let next = SegmentShape {
            size: 400,
            next_offset: 100,
        };
        assert!(joins(output(0, 600), next, 1000));
        assert!(!joins(output(0, 601), next, 1000));
        let pending = GroupOutput {
            pending_filler: true,
            ..output(0, 600)
        };
        assert!(!joins(pending, next, 1000), "the pending filler counts");
    }

    #[test]
    fn a_segment_whose_offsets_leave_the_index_reach_starts_its_own_output() {
        let far = SegmentShape {
            size: 1,
            next_offset: i64::from(u32::MAX) + 2,
        };
        assert!(!joins(output(0, 0), far, u64::MAX));
        assert!(joins(output(1, 0), far, u64::MAX));
    }

    proptest! {
        /// Grouping greedily by the rule, with each segment cleaned to any size up to its
        /// own, never writes an output larger than `max_bytes` unless a single segment
        /// already was.
        #[test]
        fn outputs_never_outgrow_segment_bytes(
            segments in prop::collection::vec((1u64..500, 0u64..=100), 1..40),
            max_bytes in 100u64..2000,
        ) {
            let mut outputs: Vec<(u64, u64)> = Vec::new(); // (bytes, largest input)
            let mut current: Option<GroupOutput> = None;
            let mut offset = 0i64;
            for (size, kept_percent) in segments {
                let next = SegmentShape { size, next_offset: offset + 10 };
                let cleaned = size * kept_percent / 100;
                match current.as_mut() {
                    Some(out) if joins(*out, next, max_bytes) => {
                        out.bytes += cleaned;
                        if let Some(last) = outputs.last_mut() {
                            last.0 += cleaned;
                            last.1 = last.1.max(size);
                        }
                    }
                    _ => {
                        current = Some(output(offset, cleaned));
                        outputs.push((cleaned, size));
                    }
                }
                offset += 10;
            }
            for (bytes, largest) in outputs {
                prop_assert!(bytes <= max_bytes.max(largest));
            }
        }
    }
}
