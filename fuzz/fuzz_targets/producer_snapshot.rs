//! Producer-state snapshots (`ProducerStateTable::decode_snapshot`): what a broker reads
//! at startup to restore duplicate detection. Any bytes give a table or a
//! `SnapshotError`; a table read back encodes to as many bytes and decodes to itself.
#![no_main]

use idem_broker::producer_state::ProducerStateTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(resealed) = idem_fuzz::reseal_snapshot(data) {
        check(&resealed);
    }
});

fn check(data: &[u8]) {
    let Ok(table) = ProducerStateTable::decode_snapshot(data) else {
        return;
    };
    let encoded = table.encode_snapshot();
    // Fixed-size entries and no trailing bytes: the same table takes the same room.
    assert_eq!(encoded.len(), data.len());
    let again = ProducerStateTable::decode_snapshot(&encoded).expect("an encoded table reads");
    assert_eq!(again, table);
}
