//! Transaction-log records (`__transaction_state`, `LogRecord::decode(key, value)`): what
//! a coordinator reads when it takes a slice over. Any key and value give a record or a
//! `RecordError`; a record read back encodes to one that decodes to itself.
#![no_main]

use idem_coordinator::log::record::LogRecord;
use idem_coordinator::txn::state::TxnState;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (key, value) = idem_fuzz::split_key_value(data);
    let Ok(record) = LogRecord::decode(key, value) else {
        return;
    };
    let (key, value) = record.encode();
    let again = LogRecord::decode(Some(&key), value.as_deref()).expect("an encoded record reads");
    // A `Dead` transaction is written as its id's tombstone (see `LogRecord::encode`).
    let expected = match record {
        LogRecord::Txn(meta) if meta.state == TxnState::Dead => LogRecord::Removed {
            transactional_id: meta.transactional_id,
        },
        other => other,
    };
    assert_eq!(again, expected);
});
