//! What the fuzz targets share: how one fuzzer input is cut into a record's key and
//! value, and how a mutated input is re-sealed with a valid CRC. A CRC-guarded decoder
//! refuses almost every mutation at its first check, so each target decodes the input
//! twice: as it came (the CRC check itself is under test) and re-sealed (what lies
//! behind the check is).

/// Byte 0 of a key/value input: bit 0 set = the key is present, bit 1 = the value is.
const KEY_PRESENT: u8 = 1;
const VALUE_PRESENT: u8 = 2;

/// Cuts `data` into a record's key and value: `flags u8 | key_len u16 | key | value`,
/// where `flags` says which of the two are present (absent = null) and a short input
/// leaves the rest empty. Every input means something, so no mutation is wasted.
pub fn split_key_value(data: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let Some((&flags, rest)) = data.split_first() else {
        return (None, None);
    };
    let (key_len, rest) = match rest {
        [hi, lo, rest @ ..] => (usize::from(u16::from_be_bytes([*hi, *lo])), rest),
        _ => (0, rest),
    };
    let (key, value) = rest.split_at(key_len.min(rest.len()));
    (
        (flags & KEY_PRESENT != 0).then_some(key),
        (flags & VALUE_PRESENT != 0).then_some(value),
    )
}

/// The inverse of [`split_key_value`], for writing seeds. A key longer than `u16::MAX`
/// bytes cannot be framed and is refused.
pub fn join_key_value(key: Option<&[u8]>, value: Option<&[u8]>) -> Option<Vec<u8>> {
    let key_len = u16::try_from(key.map_or(0, <[u8]>::len)).ok()?;
    let mut out =
        vec![(u8::from(key.is_some()) * KEY_PRESENT) | (u8::from(value.is_some()) * VALUE_PRESENT)];
    out.extend_from_slice(&key_len.to_be_bytes());
    out.extend_from_slice(key.unwrap_or_default());
    out.extend_from_slice(value.unwrap_or_default());
    Some(out)
}

/// Record batch (docs/format.md): `crc` at bytes 17..21 covers bytes 21 up to the end of
/// the batch (`12 + batch_length`, or the input's end if shorter).
pub fn reseal_batch(data: &[u8]) -> Option<Vec<u8>> {
    const OFF_BATCH_LENGTH: usize = 8;
    const OFF_CRC: usize = 17;
    const OFF_ATTRIBUTES: usize = 21;
    if data.len() < idem_proto::batch::HEADER_LEN {
        return None;
    }
    let mut out = data.to_vec();
    let batch_length = i32::from_be_bytes(
        data[OFF_BATCH_LENGTH..OFF_BATCH_LENGTH + 4]
            .try_into()
            .ok()?,
    );
    let end = usize::try_from(batch_length)
        .ok()
        .and_then(|len| len.checked_add(idem_proto::batch::LOG_OVERHEAD))
        .map_or(data.len(), |size| size.clamp(OFF_ATTRIBUTES, data.len()));
    let crc = crc32c::crc32c(&out[OFF_ATTRIBUTES..end]);
    out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Some(out)
}

/// Producer state snapshot: `magic 4 | version 2 | crc 4 | body`, the CRC over the body.
pub fn reseal_snapshot(data: &[u8]) -> Option<Vec<u8>> {
    const PREAMBLE_LEN: usize = 10;
    if data.len() < PREAMBLE_LEN {
        return None;
    }
    let mut out = data.to_vec();
    let crc = crc32c::crc32c(&out[PREAMBLE_LEN..]);
    out[PREAMBLE_LEN - 4..PREAMBLE_LEN].copy_from_slice(&crc.to_be_bytes());
    Some(out)
}

/// Transaction index file: the last 4 bytes are the CRC of everything before them.
pub fn reseal_txn_index(data: &[u8]) -> Option<Vec<u8>> {
    let body_len = data.len().checked_sub(4)?;
    let mut out = data.to_vec();
    let crc = crc32c::crc32c(&out[..body_len]);
    out[body_len..].copy_from_slice(&crc.to_be_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_value_survive_the_framing() {
        for (key, value) in [
            (Some(&b"orders-1"[..]), Some(&b"{}"[..])),
            (None, Some(&b"{\"fence\":3}"[..])),
            (Some(&b"gone"[..]), None),
            (None, None),
        ] {
            let framed = join_key_value(key, value).expect("short key");
            assert_eq!(split_key_value(&framed), (key, value));
        }
    }
}
