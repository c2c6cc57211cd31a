//! Control records (`idem_proto::control::decode_control`): the transaction markers a
//! broker reads back from its log and a coordinator from a fetch. Any bytes give a
//! marker or a `BatchError`; a marker read back encodes to a batch that says the same.
#![no_main]

use idem_proto::{batch, control};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(resealed) = idem_fuzz::reseal_batch(data) {
        check(&resealed);
    }
});

fn check(data: &[u8]) {
    let Ok(marker) = control::decode_control(data) else {
        return;
    };
    let header = batch::decode_header(data).expect("a marker has a header");
    assert!(header.is_control());
    let encoded = control::encode_control(
        header.producer_id,
        header.producer_epoch,
        marker,
        header.base_timestamp,
    );
    let reheader = batch::validate_produced(&encoded).expect("an encoded marker is valid");
    assert_eq!(
        (reheader.producer_id, reheader.producer_epoch),
        (header.producer_id, header.producer_epoch)
    );
    assert_eq!(control::decode_control(&encoded), Ok(marker));
}
