//! Offset index files (`{base_offset}.index`, `idem_broker::log::index::decode`): the
//! sparse index a segment's lookups start from. Any bytes give entries or the reason
//! the file is rebuilt; accepted entries strictly increase and encode to the same bytes.
#![no_main]

use idem_broker::log::index;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(entries) = index::decode(data) else {
        return;
    };
    assert_eq!(entries.len() * index::ENTRY_LEN, data.len());
    for pair in entries.windows(2) {
        assert!(pair[0].relative_offset < pair[1].relative_offset);
        assert!(pair[0].position < pair[1].position);
    }
    let encoded: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    assert_eq!(encoded, data);
});
