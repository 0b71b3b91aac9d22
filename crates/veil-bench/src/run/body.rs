//! The message body format. Every body carries its run, producer, sequence number and send time, so that a
//! consumer can tell this run's messages from leftovers, account for each one, and measure end-to-end latency
//! without any state shared with the producer but the clock.

use bytes::Bytes;

/// The body prefix: `vb1:` + run (8 hex) + `:` + producer (4 hex) + `:` + sequence (12 hex) + `:` + send
/// time in µs (14 hex), then padding. ASCII, because SQS bodies are Unicode text.
const BODY_MAGIC: &str = "vb1:";
pub const BODY_HEADER_LEN: usize = 4 + 8 + 1 + 4 + 1 + 12 + 1 + 14;

/// The identity and send time a body carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyId {
    pub run: u32,
    pub producer: u16,
    pub seq: u64,
    pub sent_us: u64,
}

impl BodyId {
    /// The key of the received-message table: producer in the top 16 bits, sequence below.
    pub(super) fn key(&self) -> u64 {
        (u64::from(self.producer) << 48) | (self.seq & 0xffff_ffff_ffff)
    }
}

/// Encodes `id` padded with `.` to `size` bytes (never shorter than the header).
pub fn encode_body(id: BodyId, size: usize) -> Bytes {
    let mut body = format!(
        "{BODY_MAGIC}{:08x}:{:04x}:{:012x}:{:014x}",
        id.run,
        id.producer,
        id.seq & 0xffff_ffff_ffff,
        id.sent_us & 0xff_ffff_ffff_ffff
    );
    if body.len() < size {
        body.extend(std::iter::repeat_n('.', size - body.len()));
    }
    Bytes::from(body)
}

/// Decodes a body written by [`encode_body`]; `None` for anything else (counted as foreign).
pub fn decode_body(body: &[u8]) -> Option<BodyId> {
    let header = body.get(..BODY_HEADER_LEN)?;
    let header = std::str::from_utf8(header).ok()?;
    let rest = header.strip_prefix(BODY_MAGIC)?;
    let mut fields = rest.split(':');
    let run = fields.next().filter(|f| f.len() == 8)?;
    let producer = fields.next().filter(|f| f.len() == 4)?;
    let seq = fields.next().filter(|f| f.len() == 12)?;
    let sent = fields.next().filter(|f| f.len() == 14)?;
    Some(BodyId {
        run: u32::from_str_radix(run, 16).ok()?,
        producer: u16::from_str_radix(producer, 16).ok()?,
        seq: u64::from_str_radix(seq, 16).ok()?,
        sent_us: u64::from_str_radix(sent, 16).ok()?,
    })
}

/// A random-enough run id: distinguishes this run's bodies from leftovers of earlier runs in the same queue.
pub fn new_run_id() -> u32 {
    let uuid = uuid::Uuid::new_v4();
    let bytes = uuid.as_bytes();
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(producer: u16, seq: u64) -> BodyId {
        BodyId {
            run: 0xdead_beef,
            producer,
            seq,
            sent_us: 123_456_789,
        }
    }

    #[test]
    fn body_round_trips_and_is_padded() {
        let body = encode_body(id(7, 42), 1024);
        assert_eq!(body.len(), 1024);
        assert!(body.is_ascii());
        assert_eq!(decode_body(&body), Some(id(7, 42)));
    }

    #[test]
    fn body_is_never_shorter_than_its_header() {
        let body = encode_body(id(65_535, (1 << 48) - 1), 1);
        assert_eq!(body.len(), BODY_HEADER_LEN);
        assert_eq!(
            decode_body(&body).map(|id| (id.producer, id.seq)),
            Some((65_535, (1 << 48) - 1))
        );
    }

    #[test]
    fn foreign_bodies_do_not_decode() {
        assert_eq!(decode_body(b"hello"), None);
        assert_eq!(decode_body(&[b'x'; 100]), None);
        let mut body = encode_body(id(1, 1), 64).to_vec();
        body[6] = b'z'; // not hex
        assert_eq!(decode_body(&body), None);
    }
}
