//! The record batch: the unit a producer sends, a broker appends and a consumer reads.
//! One format on the wire and on disk (docs/format.md): a fixed 61-byte header, then
//! the records. The CRC32C covers everything after the `crc` field, so the broker can
//! set `base_offset` and `partition_leader_epoch` without recomputing it.

use bytes::{BufMut, Bytes, BytesMut};

/// Size of the fixed header that precedes the records.
pub const HEADER_LEN: usize = 61;
/// `base_offset` (8) + `batch_length` (4): the part of the header `batch_length` excludes.
pub const LOG_OVERHEAD: usize = 12;
pub const MAGIC: u8 = 1;
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;

/// Attribute bit: the batch belongs to a transaction.
pub const ATTR_TRANSACTIONAL: u16 = 1 << 4;
/// Attribute bit: the batch is a control batch (commit/abort marker).
pub const ATTR_CONTROL: u16 = 1 << 5;
/// Attribute bit: the control batch's `base_timestamp` is its delete horizon (Kafka's
/// KIP-534): the log cleaner set it when the marker's transaction had no batch left, and
/// may turn the marker into a [`filler`] from that time on. Only the cleaner sets it; a
/// produced batch carrying it is refused like any reserved bit.
pub const ATTR_DELETE_HORIZON: u16 = 1 << 6;
/// Every attribute bit a produced batch may carry; the others are reserved and must be 0
/// (there is no compression or timestamp type yet, so a set bit means the bytes are not
/// ours, and [`ATTR_DELETE_HORIZON`] belongs to the log cleaner).
pub const ATTR_DEFINED: u16 = ATTR_TRANSACTIONAL | ATTR_CONTROL;

const OFF_BASE_OFFSET: usize = 0;
const OFF_BATCH_LENGTH: usize = 8;
const OFF_LEADER_EPOCH: usize = 12;
const OFF_MAGIC: usize = 16;
const OFF_CRC: usize = 17;
const OFF_ATTRIBUTES: usize = 21;
const OFF_LAST_OFFSET_DELTA: usize = 23;
const OFF_BASE_TIMESTAMP: usize = 27;
const OFF_MAX_TIMESTAMP: usize = 35;
const OFF_PRODUCER_ID: usize = 43;
const OFF_PRODUCER_EPOCH: usize = 51;
const OFF_BASE_SEQUENCE: usize = 53;
const OFF_RECORD_COUNT: usize = 57;

/// Why bytes are not a valid record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("unsupported batch magic {0}")]
    BadMagic(u8),
    #[error("batch length {0} is invalid")]
    BadLength(i32),
    #[error("batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("batch records are malformed: {0}")]
    MalformedRecords(&'static str),
    #[error("batch holds {declared} records by its header but {found} in its body")]
    RecordCountMismatch { declared: i32, found: i32 },
    #[error("batch attributes {attributes:#06x} set reserved bits {reserved:#06x}; a producer may set only 0x10 (transactional) and 0x20 (control)")]
    ReservedAttributes { attributes: u16, reserved: u16 },
    #[error("batch offsets overflow: base offset {base_offset} + last offset delta {last_offset_delta} is past the largest offset")]
    OffsetOverflow {
        base_offset: i64,
        last_offset_delta: i32,
    },
}

/// One record as a producer hands it over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    pub timestamp_ms: i64,
}

/// One record read back from a batch, with its absolute offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
}

/// Who wrote a batch and where it sits in that producer's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerInfo {
    /// A batch from a producer without idempotence.
    pub const NONE: ProducerInfo = ProducerInfo {
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
    };
}

/// The decoded fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: u8,
    pub crc: u32,
    pub attributes: u16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Total bytes of the batch, header included.
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// The delete horizon the log cleaner set on this control batch, if it did.
    pub fn delete_horizon(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
    /// Whether this is what the log cleaner leaves of removed batches ([`filler`]): no
    /// record, no producer, neither transactional nor control.
    pub fn is_filler(&self) -> bool {
        self.record_count == 0
            && !self.has_producer_id()
            && self.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) == 0
    }
    /// Sequence of the last record; sequences wrap from `i32::MAX` to 0.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return NO_SEQUENCE;
        }
        // Saturating: a header not validated as produced may say `i32::MIN` records.
        sequence_add(self.base_sequence, self.record_count.saturating_sub(1))
    }
    pub fn producer(&self) -> ProducerInfo {
        ProducerInfo {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
        }
    }
}

/// `sequence + delta`, wrapping from `i32::MAX` to 0 as Kafka's sequences do.
pub fn sequence_add(sequence: i32, delta: i32) -> i32 {
    let wrapped = (i64::from(sequence) + i64::from(delta)) % (i64::from(i32::MAX) + 1);
    // The modulus keeps the value within 0..=i32::MAX.
    wrapped as i32
}

/// Encodes `records` as one batch with base offset 0 and leader epoch -1; the broker
/// sets both when it appends.
pub fn encode(producer: ProducerInfo, attributes: u16, records: &[Record]) -> Bytes {
    let base_timestamp = records.first().map_or(0, |r| r.timestamp_ms);
    let max_timestamp = records.iter().map(|r| r.timestamp_ms).max().unwrap_or(0);
    let mut buf =
        BytesMut::with_capacity(HEADER_LEN + records.iter().map(record_size_hint).sum::<usize>());
    buf.put_i64(0);
    buf.put_i32(0); // batch_length, filled below
    buf.put_i32(-1);
    buf.put_u8(MAGIC);
    buf.put_u32(0); // crc, filled below
    buf.put_u16(attributes);
    buf.put_i32(records.len().saturating_sub(1) as i32);
    buf.put_i64(base_timestamp);
    buf.put_i64(max_timestamp);
    buf.put_i64(producer.producer_id);
    buf.put_i16(producer.producer_epoch);
    buf.put_i32(producer.base_sequence);
    buf.put_i32(records.len() as i32);
    for (delta, record) in records.iter().enumerate() {
        // Wrapping, as the reader adds it back: any two timestamps a caller hands over
        // (`i64::MIN` and `i64::MAX` in one batch) round-trip exactly.
        put_record(
            &mut buf,
            delta as i32,
            record.timestamp_ms.wrapping_sub(base_timestamp),
            record,
        );
    }
    let batch_length = (buf.len() - LOG_OVERHEAD) as i32;
    buf[OFF_BATCH_LENGTH..OFF_BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&buf[OFF_ATTRIBUTES..]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    buf.freeze()
}

fn record_size_hint(record: &Record) -> usize {
    28 + record.key.as_ref().map_or(0, Bytes::len)
        + record.value.as_ref().map_or(0, Bytes::len)
        + record
            .headers
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum::<usize>()
}

// record := length i32 | timestamp_delta i64 | offset_delta i32 | key | value | headers
// key, value := len i32 (-1 = null) | bytes; headers := count i32 | (key, value)*
fn put_record(buf: &mut BytesMut, offset_delta: i32, timestamp_delta: i64, record: &Record) {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i64(timestamp_delta);
    buf.put_i32(offset_delta);
    put_nullable(buf, record.key.as_deref());
    put_nullable(buf, record.value.as_deref());
    buf.put_i32(record.headers.len() as i32);
    for (key, value) in &record.headers {
        put_nullable(buf, Some(key.as_bytes()));
        put_nullable(buf, Some(value));
    }
    let length = (buf.len() - start - 4) as i32;
    buf[start..start + 4].copy_from_slice(&length.to_be_bytes());
}

fn put_nullable(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => buf.put_i32(-1),
        Some(b) => {
            buf.put_i32(b.len() as i32);
            buf.put_slice(b);
        }
    }
}

fn be_i16(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}
fn be_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}
fn be_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}
fn be_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}
fn be_i64(buf: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    i64::from_be_bytes(b)
}

/// Decodes the fixed header without checking the CRC. `buf` may hold more than one batch.
pub fn decode_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    if buf.len() < HEADER_LEN {
        return Err(BatchError::Truncated {
            needed: HEADER_LEN,
            available: buf.len(),
        });
    }
    let magic = buf[OFF_MAGIC];
    if magic != MAGIC {
        return Err(BatchError::BadMagic(magic));
    }
    let batch_length = be_i32(buf, OFF_BATCH_LENGTH);
    if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Err(BatchError::BadLength(batch_length));
    }
    // Every reader asks for the last and next offset: neither may overflow (a debug
    // build panicked there, a release one wrapped to a negative offset).
    let base_offset = be_i64(buf, OFF_BASE_OFFSET);
    let last_offset_delta = be_i32(buf, OFF_LAST_OFFSET_DELTA);
    // Two steps: `base + (delta + 1)` alone passed i64::MIN with a delta of -1 (found by
    // fuzz/fuzz_targets/record_batch.rs).
    let next_offset = base_offset
        .checked_add(i64::from(last_offset_delta))
        .and_then(|last| last.checked_add(1));
    if next_offset.is_none() {
        return Err(BatchError::OffsetOverflow {
            base_offset,
            last_offset_delta,
        });
    }
    Ok(BatchHeader {
        base_offset,
        batch_length,
        partition_leader_epoch: be_i32(buf, OFF_LEADER_EPOCH),
        magic,
        crc: be_u32(buf, OFF_CRC),
        attributes: be_u16(buf, OFF_ATTRIBUTES),
        last_offset_delta,
        base_timestamp: be_i64(buf, OFF_BASE_TIMESTAMP),
        max_timestamp: be_i64(buf, OFF_MAX_TIMESTAMP),
        producer_id: be_i64(buf, OFF_PRODUCER_ID),
        producer_epoch: be_i16(buf, OFF_PRODUCER_EPOCH),
        base_sequence: be_i32(buf, OFF_BASE_SEQUENCE),
        record_count: be_i32(buf, OFF_RECORD_COUNT),
    })
}

/// Decodes the header of the batch at the start of `buf` and checks that the whole batch
/// is present and its CRC matches. Returns the header; the batch is `buf[..header.size()]`.
pub fn verify(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = decode_header(buf)?;
    let size = header.size();
    if buf.len() < size {
        return Err(BatchError::Truncated {
            needed: size,
            available: buf.len(),
        });
    }
    let computed = crc32c::crc32c(&buf[OFF_ATTRIBUTES..size]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Full validation of a batch a producer sent: CRC, no reserved attribute bit set, and
/// records that parse and agree with the header's count and offset deltas. `buf` must
/// hold exactly one batch.
pub fn validate_produced(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = verify(buf)?;
    if header.size() != buf.len() {
        return Err(BatchError::BadLength(header.batch_length));
    }
    let reserved = header.attributes & !ATTR_DEFINED;
    if reserved != 0 {
        return Err(BatchError::ReservedAttributes {
            attributes: header.attributes,
            reserved,
        });
    }
    if header.record_count <= 0 {
        return Err(BatchError::MalformedRecords(
            "a batch needs at least one record",
        ));
    }
    if header.last_offset_delta != header.record_count - 1 {
        return Err(BatchError::MalformedRecords(
            "last_offset_delta disagrees with record_count",
        ));
    }
    // Walked without copying a key or value: this runs on every produced batch.
    let mut next_delta: i64 = 0;
    let mut consecutive = true;
    walk_records(buf, |_, record| {
        consecutive &= i64::from(record.offset_delta) == next_delta;
        next_delta += 1;
    })?;
    if !consecutive {
        return Err(BatchError::MalformedRecords(
            "record offset deltas are not consecutive",
        ));
    }
    Ok(header)
}

/// How many bytes at the start of a batch [`assign`] writes to (base offset, batch
/// length, partition leader epoch); the CRC covers none of them.
pub const STAMPED_LEN: usize = OFF_MAGIC;

/// The first [`STAMPED_LEN`] bytes of the batch at the start of `buf` as [`assign`]
/// would leave them, without touching `buf`: a log writes these and then the rest of
/// the batch as received, instead of copying the whole batch to stamp it. `buf` must
/// hold at least a batch header ([`decode_header`] checks that).
pub fn stamped_prefix(
    buf: &[u8],
    base_offset: i64,
    partition_leader_epoch: i32,
) -> [u8; STAMPED_LEN] {
    let mut prefix = [0u8; STAMPED_LEN];
    prefix.copy_from_slice(&buf[..STAMPED_LEN]);
    assign(&mut prefix, base_offset, partition_leader_epoch);
    prefix
}

/// Sets the offset and leader epoch the broker assigned; the CRC stays valid.
pub fn assign(buf: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    buf[OFF_BASE_OFFSET..OFF_BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    buf[OFF_LEADER_EPOCH..OFF_LEADER_EPOCH + 4]
        .copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// The records of the single batch at the start of `buf`, with absolute offsets.
/// Does not check the CRC (call [`verify`] first).
pub fn records(buf: &[u8]) -> Result<Vec<StoredRecord>, BatchError> {
    let mut out = Vec::new();
    walk_records(buf, |_, raw| {
        let headers = raw
            .headers()
            .map(|(k, v)| (k.to_string(), Bytes::copy_from_slice(v.unwrap_or_default())))
            .collect();
        out.push(StoredRecord {
            offset: raw.offset,
            timestamp_ms: raw.timestamp_ms,
            key: raw.key.map(Bytes::copy_from_slice),
            value: raw.value.map(Bytes::copy_from_slice),
            headers,
        });
    })?;
    Ok(out)
}

/// What a compaction needs to know of one stored record to decide whether it stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    /// A record without a value is a tombstone: the key's deletion.
    pub is_tombstone: bool,
}

/// The batch at the start of `buf` with only the records `keep` accepts, or `None` when
/// it keeps them all. Everything of the header stays (base offset, last offset delta,
/// timestamps, producer id, epoch and base sequence), so offsets, the producer's
/// sequence range and the batch's place in the log are as before; the kept records are
/// copied verbatim (their offset deltas leave gaps where records went) and the batch
/// gets its new length, record count and CRC. A batch may keep no record at all: its
/// header still carries the offsets and the producer state it stands for.
pub fn retain_records(
    buf: &[u8],
    mut keep: impl FnMut(RecordView<'_>) -> bool,
) -> Result<Option<Bytes>, BatchError> {
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut dropped = false;
    let header = walk_records(buf, |_, raw| {
        let view = RecordView {
            offset: raw.offset,
            timestamp_ms: raw.timestamp_ms,
            key: raw.key,
            is_tombstone: raw.value.is_none(),
        };
        if keep(view) {
            kept.push(raw.bytes);
        } else {
            dropped = true;
        }
    })?;
    if !dropped {
        return Ok(None);
    }
    let body: usize = kept.iter().map(|r| r.len()).sum();
    let mut out = BytesMut::with_capacity(HEADER_LEN + body);
    out.put_slice(&buf[..HEADER_LEN]);
    for record in &kept {
        out.put_slice(record);
    }
    let batch_length = (out.len() - LOG_OVERHEAD) as i32;
    out[OFF_BATCH_LENGTH..OFF_BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    out[OFF_RECORD_COUNT..OFF_RECORD_COUNT + 4].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[OFF_ATTRIBUTES..]);
    out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    debug_assert_eq!(header.base_offset, be_i64(&out, OFF_BASE_OFFSET));
    Ok(Some(out.freeze()))
}

/// A batch without records standing for the offsets `base_offset ..= base_offset +
/// last_offset_delta`, written in `partition_leader_epoch`: what the log cleaner leaves
/// where it removed batches (empty data batches, markers of finished transactions), so
/// the log stays dense at batch level and the leader-epoch history read from headers is
/// unchanged. No producer, not transactional, not control; both timestamps are
/// `max_timestamp`, the newest of the batches it replaces (time retention goes by it).
pub fn filler(
    base_offset: i64,
    last_offset_delta: i32,
    partition_leader_epoch: i32,
    max_timestamp: i64,
) -> Bytes {
    let mut buf = BytesMut::with_capacity(HEADER_LEN);
    buf.put_i64(base_offset);
    buf.put_i32((HEADER_LEN - LOG_OVERHEAD) as i32);
    buf.put_i32(partition_leader_epoch);
    buf.put_u8(MAGIC);
    buf.put_u32(0); // crc, filled below
    buf.put_u16(0);
    buf.put_i32(last_offset_delta);
    buf.put_i64(max_timestamp);
    buf.put_i64(max_timestamp);
    buf.put_i64(NO_PRODUCER_ID);
    buf.put_i16(NO_PRODUCER_EPOCH);
    buf.put_i32(NO_SEQUENCE);
    buf.put_i32(0);
    let crc = crc32c::crc32c(&buf[OFF_ATTRIBUTES..]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    buf.freeze()
}

/// Marks the control batch at the start of `buf` with delete horizon `horizon_ms`
/// ([`ATTR_DELETE_HORIZON`], its base timestamp set to the horizon) and recomputes the
/// CRC. The control record's own timestamp moves with the base (nobody reads it). Refused
/// for a batch that is not a control batch; `buf` must hold the whole batch.
pub fn set_delete_horizon(buf: &mut [u8], horizon_ms: i64) -> Result<(), BatchError> {
    let header = decode_header(buf)?;
    if !header.is_control() {
        return Err(BatchError::MalformedRecords(
            "only a control batch takes a delete horizon",
        ));
    }
    let size = header.size();
    if buf.len() < size {
        return Err(BatchError::Truncated {
            needed: size,
            available: buf.len(),
        });
    }
    let attributes = header.attributes | ATTR_DELETE_HORIZON;
    buf[OFF_ATTRIBUTES..OFF_ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    buf[OFF_BASE_TIMESTAMP..OFF_BASE_TIMESTAMP + 8].copy_from_slice(&horizon_ms.to_be_bytes());
    let crc = crc32c::crc32c(&buf[OFF_ATTRIBUTES..size]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// One record's fields, borrowed from its batch.
struct RawRecord<'a> {
    /// The whole record as stored, its length prefix included.
    bytes: &'a [u8],
    offset_delta: i32,
    /// The batch's base offset plus `offset_delta`, checked by [`walk_records`].
    offset: i64,
    /// The batch's base timestamp plus the record's delta, wrapping as the encoder
    /// subtracted it.
    timestamp_ms: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    /// `header_count` (key, value) pairs, already checked by [`walk_records`].
    header_bytes: &'a [u8],
    header_count: i32,
}

impl<'a> RawRecord<'a> {
    fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> {
        let mut reader = Reader {
            buf: self.header_bytes,
            at: 0,
        };
        // The walk validated every pair, so a failure here cannot happen; it ends the
        // iteration rather than panicking.
        (0..self.header_count).map_while(move |_| {
            let key = reader.slice().ok()??;
            let key = std::str::from_utf8(key).ok()?;
            let value = reader.slice().ok()?;
            Some((key, value))
        })
    }
}

/// Checks the framing of every record of the single batch at the start of `buf` and
/// hands each to `visit` without copying it; returns the batch header. Does not check
/// the CRC (call [`verify`] first).
fn walk_records<'a>(
    buf: &'a [u8],
    mut visit: impl FnMut(&BatchHeader, RawRecord<'a>),
) -> Result<BatchHeader, BatchError> {
    let header = decode_header(buf)?;
    let size = header.size();
    if buf.len() < size {
        return Err(BatchError::Truncated {
            needed: size,
            available: buf.len(),
        });
    }
    let body = &buf[HEADER_LEN..size];
    let mut reader = Reader { buf: body, at: 0 };
    let mut found: i64 = 0;
    while reader.at < body.len() {
        let record_start = reader.at;
        let length = reader.i32()?;
        if length < 0 || reader.remaining() < length as usize {
            return Err(BatchError::MalformedRecords("record length out of bounds"));
        }
        let end = reader.at + length as usize;
        let timestamp_delta = reader.i64()?;
        let offset_delta = reader.i32()?;
        let key = reader.slice()?;
        let value = reader.slice()?;
        let header_count = reader.i32()?;
        if header_count < 0 {
            return Err(BatchError::MalformedRecords("negative header count"));
        }
        let headers_start = reader.at;
        for _ in 0..header_count {
            let k = reader
                .slice()?
                .ok_or(BatchError::MalformedRecords("null header key"))?;
            std::str::from_utf8(k)
                .map_err(|_| BatchError::MalformedRecords("header key is not UTF-8"))?;
            reader.slice()?;
        }
        if reader.at != end {
            return Err(BatchError::MalformedRecords(
                "record length disagrees with its fields",
            ));
        }
        // Checked: the record's offset delta is its own field, not bounded by the
        // header's. Timestamps wrap instead (see `encode`); both sums overflowed here
        // before (found by fuzz/fuzz_targets/record_batch.rs).
        let offset = header
            .base_offset
            .checked_add(i64::from(offset_delta))
            .ok_or(BatchError::MalformedRecords("record offset overflows"))?;
        visit(
            &header,
            RawRecord {
                bytes: &body[record_start..end],
                offset_delta,
                offset,
                timestamp_ms: header.base_timestamp.wrapping_add(timestamp_delta),
                key,
                value,
                header_bytes: &body[headers_start..end],
                header_count,
            },
        );
        found += 1;
    }
    if found != i64::from(header.record_count) {
        return Err(BatchError::RecordCountMismatch {
            declared: header.record_count,
            found: found.min(i64::from(i32::MAX)) as i32,
        });
    }
    Ok(header)
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }
    fn take(&mut self, n: usize) -> Result<usize, BatchError> {
        if self.remaining() < n {
            return Err(BatchError::MalformedRecords(
                "record field runs past the batch",
            ));
        }
        let at = self.at;
        self.at += n;
        Ok(at)
    }
    fn i32(&mut self) -> Result<i32, BatchError> {
        let at = self.take(4)?;
        Ok(be_i32(self.buf, at))
    }
    fn i64(&mut self) -> Result<i64, BatchError> {
        let at = self.take(8)?;
        Ok(be_i64(self.buf, at))
    }
    /// A nullable length-prefixed field (-1 = null), borrowed.
    fn slice(&mut self) -> Result<Option<&'a [u8]>, BatchError> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(BatchError::MalformedRecords("negative field length"));
        }
        let at = self.take(len as usize)?;
        Ok(Some(&self.buf[at..at + len as usize]))
    }
}

/// Iterates over the whole batches in a buffer of concatenated batches (a fetch
/// response). Stops at the first batch that is incomplete or fails its CRC, yielding
/// that error once.
pub struct Batches<'a> {
    buf: &'a [u8],
    failed: bool,
}

impl<'a> Batches<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Batches { buf, failed: false }
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<(BatchHeader, &'a [u8]), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() || self.failed {
            return None;
        }
        match verify(self.buf) {
            Ok(header) => {
                let (batch, rest) = self.buf.split_at(header.size());
                self.buf = rest;
                Some(Ok((header, batch)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, value: &str, ts: i64) -> Record {
        Record {
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: vec![("h".into(), Bytes::from_static(b"v"))],
            timestamp_ms: ts,
        }
    }

    #[test]
    fn given_records_dropped_then_the_rest_keeps_offsets_timestamps_and_the_header() {
        let producer = ProducerInfo {
            producer_id: 7,
            producer_epoch: 2,
            base_sequence: 40,
        };
        let mut stored = encode(
            producer,
            ATTR_TRANSACTIONAL,
            &[rec("a", "1", 100), rec("b", "2", 105), rec("a", "3", 110)],
        )
        .to_vec();
        assign(&mut stored, 500, 4);
        let before = verify(&stored).expect("valid");
        let mut seen = Vec::new();
        let kept = retain_records(&stored, |r| {
            seen.push((r.offset, r.timestamp_ms, r.key.map(<[u8]>::to_vec)));
            r.offset != 500
        })
        .expect("walks")
        .expect("rewritten");
        assert_eq!(seen[1], (501, 105, Some(b"b".to_vec())));
        let after = verify(&kept).expect("the rewritten batch passes its CRC");
        assert_eq!(after.record_count, 2);
        assert_eq!(
            (
                after.base_offset,
                after.last_offset_delta,
                after.partition_leader_epoch
            ),
            (500, 2, 4)
        );
        assert_eq!(
            (
                after.producer(),
                after.attributes,
                after.base_timestamp,
                after.max_timestamp
            ),
            (before.producer(), before.attributes, 100, 110)
        );
        let records = records(&kept).expect("records");
        assert_eq!(
            records
                .iter()
                .map(|r| (r.offset, r.timestamp_ms))
                .collect::<Vec<_>>(),
            vec![(501, 105), (502, 110)]
        );
        assert_eq!(records[1].value.as_deref(), Some(&b"3"[..]));
        assert_eq!(
            records[1].headers,
            vec![("h".into(), Bytes::from_static(b"v"))]
        );
    }

    #[test]
    fn given_every_record_kept_then_nothing_is_rewritten_and_given_none_the_header_stays() {
        let stored = encode(ProducerInfo::NONE, 0, &[rec("a", "1", 1), rec("b", "2", 2)]);
        assert_eq!(retain_records(&stored, |_| true).expect("walks"), None);
        let empty = retain_records(&stored, |_| false)
            .expect("walks")
            .expect("rewritten");
        let header = verify(&empty).expect("valid");
        assert_eq!((header.record_count, header.last_offset_delta), (0, 1));
        assert_eq!(header.size(), HEADER_LEN);
        assert!(records(&empty).expect("records").is_empty());
        let tombstone = encode(
            ProducerInfo::NONE,
            0,
            &[Record {
                value: None,
                ..rec("gone", "", 3)
            }],
        );
        let mut flagged = false;
        retain_records(&tombstone, |r| {
            flagged = r.is_tombstone;
            true
        })
        .expect("walks");
        assert!(flagged);
    }

    #[test]
    fn the_stamped_prefix_and_the_untouched_rest_are_the_assigned_batch() {
        let encoded = encode(
            ProducerInfo::NONE,
            0,
            &[rec("k", "v", 5), rec("k2", "v2", 6)],
        );
        let mut assigned = encoded.to_vec();
        assign(&mut assigned, 1000, 3);
        let prefix = stamped_prefix(&encoded, 1000, 3);
        let mut joined = prefix.to_vec();
        joined.extend_from_slice(&encoded[STAMPED_LEN..]);
        assert_eq!(joined, assigned);
        verify(&joined).expect("the CRC still holds");
    }

    #[test]
    fn encoded_batch_round_trips_with_assigned_offsets() {
        let producer = ProducerInfo {
            producer_id: 7,
            producer_epoch: 2,
            base_sequence: 40,
        };
        let mut buf = encode(producer, 0, &[rec("a", "1", 100), rec("b", "2", 105)]).to_vec();
        assign(&mut buf, 1000, 3);
        let header = validate_produced(&buf).expect("valid batch");
        assert_eq!(header.base_offset, 1000);
        assert_eq!(header.partition_leader_epoch, 3);
        assert_eq!(header.record_count, 2);
        assert_eq!(header.last_offset(), 1001);
        assert_eq!(header.last_sequence(), 41);
        assert_eq!(header.max_timestamp, 105);
        let records = records(&buf).expect("records");
        assert_eq!(records[1].offset, 1001);
        assert_eq!(records[1].timestamp_ms, 105);
        assert_eq!(records[1].value.as_deref(), Some(&b"2"[..]));
        assert_eq!(
            records[0].headers,
            vec![("h".to_string(), Bytes::from_static(b"v"))]
        );
    }

    #[test]
    fn given_a_reserved_attribute_bit_when_validated_then_refused_and_defined_bits_pass() {
        for bit in (0..16).map(|b| 1u16 << b) {
            let buf = encode(ProducerInfo::NONE, bit, &[rec("k", "v", 1)]);
            let result = validate_produced(&buf);
            if bit & ATTR_DEFINED != 0 {
                assert!(result.is_ok(), "bit {bit:#06x}: {result:?}");
            } else {
                assert_eq!(
                    result,
                    Err(BatchError::ReservedAttributes {
                        attributes: bit,
                        reserved: bit
                    }),
                    "bit {bit:#06x}"
                );
            }
        }
        // Compression (bits 0-2) set next to the transactional bit names only the former.
        let buf = encode(
            ProducerInfo::NONE,
            ATTR_TRANSACTIONAL | 0b001,
            &[rec("k", "v", 1)],
        );
        assert_eq!(
            validate_produced(&buf),
            Err(BatchError::ReservedAttributes {
                attributes: ATTR_TRANSACTIONAL | 0b001,
                reserved: 0b001
            })
        );
    }

    #[test]
    fn a_filler_decodes_with_a_valid_crc_and_the_offsets_and_epoch_given() {
        let bytes = filler(1_000, 249, 7, 55);
        let header = verify(&bytes).expect("a filler passes its CRC");
        assert_eq!(bytes.len(), HEADER_LEN);
        assert_eq!(
            (
                header.base_offset,
                header.last_offset(),
                header.next_offset(),
                header.partition_leader_epoch
            ),
            (1_000, 1_249, 1_250, 7)
        );
        assert_eq!(header.producer(), ProducerInfo::NONE);
        assert_eq!((header.record_count, header.attributes), (0, 0));
        assert_eq!((header.base_timestamp, header.max_timestamp), (55, 55));
        assert!(header.is_filler() && !header.is_transactional() && !header.is_control());
        assert_eq!(header.delete_horizon(), None);
        assert!(records(&bytes).expect("records").is_empty());
        // A batch emptied by compaction keeps its producer: not a filler.
        let emptied = retain_records(
            &encode(
                ProducerInfo {
                    producer_id: 3,
                    producer_epoch: 0,
                    base_sequence: 0,
                },
                0,
                &[rec("a", "1", 1)],
            ),
            |_| false,
        )
        .expect("walks")
        .expect("rewritten");
        assert!(!verify(&emptied).expect("valid").is_filler());
    }

    #[test]
    fn given_a_control_batch_when_its_horizon_is_set_then_it_reads_back_and_the_crc_holds() {
        let producer = ProducerInfo {
            producer_id: 9,
            producer_epoch: 3,
            base_sequence: NO_SEQUENCE,
        };
        let mut marker = encode(
            producer,
            ATTR_CONTROL | ATTR_TRANSACTIONAL,
            &[rec("k", "v", 100)],
        )
        .to_vec();
        assign(&mut marker, 42, 2);
        assert_eq!(verify(&marker).expect("valid").delete_horizon(), None);
        set_delete_horizon(&mut marker, 86_400_100).expect("a control batch");
        let header = verify(&marker).expect("the CRC was recomputed");
        assert_eq!(header.delete_horizon(), Some(86_400_100));
        assert_eq!(header.max_timestamp, 100, "the newest timestamp stays");
        assert_eq!(
            (
                header.base_offset,
                header.partition_leader_epoch,
                header.producer()
            ),
            (42, 2, producer)
        );
        assert!(header.is_control() && header.is_transactional() && !header.is_filler());
        let mut data = encode(ProducerInfo::NONE, 0, &[rec("k", "v", 1)]).to_vec();
        assert!(set_delete_horizon(&mut data, 5).is_err());
    }

    #[test]
    fn a_produced_batch_with_the_delete_horizon_bit_is_refused_as_reserved() {
        for attributes in [
            ATTR_DELETE_HORIZON,
            ATTR_DELETE_HORIZON | ATTR_CONTROL | ATTR_TRANSACTIONAL,
        ] {
            let buf = encode(ProducerInfo::NONE, attributes, &[rec("k", "v", 1)]);
            let refused = validate_produced(&buf);
            assert_eq!(
                refused,
                Err(BatchError::ReservedAttributes {
                    attributes,
                    reserved: ATTR_DELETE_HORIZON
                })
            );
            let message = refused.expect_err("refused").to_string();
            assert!(message.contains("reserved bits 0x0040"), "{message}");
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut buf = encode(ProducerInfo::NONE, 0, &[rec("k", "value", 1)]).to_vec();
        let last = buf.len() - 1;
        buf[last] ^= 1;
        assert!(matches!(verify(&buf), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn a_short_buffer_is_truncated() {
        let buf = encode(ProducerInfo::NONE, 0, &[rec("k", "value", 1)]);
        assert!(matches!(
            verify(&buf[..buf.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            verify(&buf[..10]),
            Err(BatchError::Truncated { .. })
        ));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(sequence_add(i32::MAX, 1), 0);
        assert_eq!(sequence_add(i32::MAX - 1, 3), 1);
        let producer = ProducerInfo {
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: i32::MAX,
        };
        let buf = encode(producer, 0, &[rec("a", "1", 0), rec("b", "2", 0)]);
        assert_eq!(decode_header(&buf).expect("header").last_sequence(), 0);
    }

    /// Found by fuzz/fuzz_targets/record_batch.rs: a batch whose base timestamp plus its
    /// record's timestamp delta overflows i64 (both large negatives) panicked `records`
    /// in a debug build ("attempt to add with overflow").
    const FUZZ_TIMESTAMP_OVERFLOW: [u8; 100] = [
        0xdd, 0xdd, 0xdd, 0xdd, 0x9d, 0xdc, 0xdd, 0x00, 0x00, 0x00, 0x00, 0x52, 0x91, 0xdd, 0xe9,
        0xff, 0x01, 0x22, 0x22, 0x00, 0x00, 0x2a, 0x37, 0x21, 0xf3, 0x82, 0x39, 0xdd, 0xdd, 0xdd,
        0xdd, 0xdd, 0xdd, 0xcd, 0x5e, 0x00, 0xde, 0xde, 0xde, 0xe0, 0xe0, 0xe0, 0xe0, 0xe0, 0xe0,
        0xe0, 0xe0, 0xe0, 0xe0, 0xe0, 0xe0, 0x00, 0x00, 0x00, 0x01, 0x22, 0x22, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x18, 0x9f, 0x0a, 0x05, 0x81, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xdd, 0x0a, 0x0a,
    ];

    #[test]
    fn given_the_fuzzed_batch_whose_timestamp_overflowed_then_reading_it_is_an_error_not_a_panic() {
        assert!(matches!(
            records(&FUZZ_TIMESTAMP_OVERFLOW),
            Err(BatchError::MalformedRecords(_) | BatchError::RecordCountMismatch { .. })
        ));
        assert!(validate_produced(&FUZZ_TIMESTAMP_OVERFLOW).is_err());
    }

    #[test]
    fn given_timestamps_at_both_ends_of_i64_then_they_round_trip_exactly() {
        let stamps = [i64::MAX, i64::MIN, 0, -1];
        let batch = encode(ProducerInfo::NONE, 0, &stamps.map(|ts| rec("k", "v", ts)));
        validate_produced(&batch).expect("valid");
        let read: Vec<i64> = records(&batch)
            .expect("records")
            .iter()
            .map(|r| r.timestamp_ms)
            .collect();
        assert_eq!(read, stamps);
    }

    #[test]
    fn given_a_base_offset_whose_last_offset_overflows_then_the_header_is_refused() {
        let mut buf = encode(ProducerInfo::NONE, 0, &[rec("a", "1", 0), rec("b", "2", 0)]).to_vec();
        assign(&mut buf, i64::MAX - 1, 0);
        assert_eq!(
            decode_header(&buf),
            Err(BatchError::OffsetOverflow {
                base_offset: i64::MAX - 1,
                last_offset_delta: 1
            })
        );
        assert!(validate_produced(&buf).is_err());
        assign(&mut buf, i64::MAX - 2, 0);
        let header = validate_produced(&buf).expect("the last offset is i64::MAX - 1");
        assert_eq!(header.next_offset(), i64::MAX);
    }

    /// Found by fuzz/fuzz_targets/record_batch.rs: base offset i64::MIN and last offset
    /// delta -1 passed the header's overflow check (`base + (delta + 1)`) and then
    /// panicked `last_offset()`.
    const FUZZ_LAST_OFFSET_UNDERFLOW: [u8; 91] = [
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4f, 0xff, 0xff, 0xff,
        0xff, 0x01, 0xc7, 0x03, 0x00, 0x23, 0x00, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0xe2, 0x67,
        0x05, 0x00, 0x00, 0x7e, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, 0x00, 0x00, 0x01, 0x8b,
        0xcf, 0xe5, 0x68, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x00, 0x00, 0x00,
        0x40,
    ];

    #[test]
    fn given_the_fuzzed_header_whose_last_offset_underflowed_then_it_is_refused() {
        assert_eq!(
            decode_header(&FUZZ_LAST_OFFSET_UNDERFLOW),
            Err(BatchError::OffsetOverflow {
                base_offset: i64::MIN,
                last_offset_delta: -1
            })
        );
    }

    #[test]
    fn given_a_record_offset_delta_past_i64_then_its_records_are_malformed() {
        // One record whose own offset delta (bytes 16..20 of the record) says 7 while the
        // header's last offset delta says 0: base + 7 overflows, base + 0 does not.
        let mut buf = encode(ProducerInfo::NONE, 0, &[rec("a", "1", 0)]).to_vec();
        assign(&mut buf, i64::MAX - 1, 0);
        buf[HEADER_LEN + 12..HEADER_LEN + 16].copy_from_slice(&7i32.to_be_bytes());
        assert_eq!(
            records(&buf),
            Err(BatchError::MalformedRecords("record offset overflows"))
        );
    }

    #[test]
    fn given_a_header_claiming_i32_min_records_then_its_last_sequence_does_not_panic() {
        let mut buf = encode(
            ProducerInfo {
                producer_id: 1,
                producer_epoch: 0,
                base_sequence: 5,
            },
            0,
            &[rec("a", "1", 0)],
        )
        .to_vec();
        buf[OFF_RECORD_COUNT..OFF_RECORD_COUNT + 4].copy_from_slice(&i32::MIN.to_be_bytes());
        let header = decode_header(&buf).expect("the header itself decodes");
        assert_eq!(header.last_sequence(), sequence_add(5, i32::MIN));
    }

    #[test]
    fn batches_iterator_stops_at_a_torn_batch() {
        let one = encode(ProducerInfo::NONE, 0, &[rec("a", "1", 0)]);
        let mut buf = one.to_vec();
        buf.extend_from_slice(&one);
        buf.extend_from_slice(&one[..20]);
        let results: Vec<_> = Batches::new(&buf).collect();
        assert_eq!(results.len(), 3);
        assert!(results[0].is_ok() && results[1].is_ok());
        assert!(results[2].is_err());
    }
}
