//! A line of input as a record: `key<separator>value` when a separator is given and
//! found, else the whole line as the value with no key.

use bytes::Bytes;

/// The key and value of `line`; split at the first `separator`.
pub(crate) fn split(line: &str, separator: Option<&str>) -> (Option<Bytes>, Bytes) {
    match separator.and_then(|sep| line.split_once(sep)) {
        Some((key, value)) => (
            Some(Bytes::copy_from_slice(key.as_bytes())),
            Bytes::copy_from_slice(value.as_bytes()),
        ),
        None => (None, Bytes::copy_from_slice(line.as_bytes())),
    }
}
