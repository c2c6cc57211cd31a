//! Transaction index files (`{base_offset}.txnindex`, `SegmentTxns::decode`): what a
//! broker reads instead of walking a sealed segment's markers. Any bytes give the
//! segment's transactions or an error; what is read back encodes to the very same bytes.
#![no_main]

use idem_broker::txn_index::SegmentTxns;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(resealed) = idem_fuzz::reseal_txn_index(data) {
        check(&resealed);
    }
});

fn check(data: &[u8]) {
    if let Ok(segment) = SegmentTxns::decode(data) {
        assert_eq!(segment.encode(), data);
    }
}
