//! Lower-case hex of digests, which SQS answers carry (`MD5OfMessageBody`) and SigV4 compares (three SHA-256
//! digests per request). Written through `hex::encode_to_slice`: `hex::encode` builds its string a char at
//! a time and cost ~25 instructions per character (docs/benchmarks.md, "Instructions per message").

/// Lower-case hex of `digest` as a `String` (for answers that keep it).
pub fn hex(digest: &[u8]) -> String {
    let mut out = vec![0u8; digest.len() * 2];
    // Fails only when the output is not twice the input, which the line above rules out.
    let _ = hex::encode_to_slice(digest, &mut out);
    // Hex digits are ASCII, so this never falls back.
    String::from_utf8(out).unwrap_or_default()
}

/// Lower-case hex of a 32-byte digest, on the stack (for comparisons and for text being assembled).
pub struct Hex32([u8; 64]);

impl Hex32 {
    pub fn of(digest: [u8; 32]) -> Self {
        let mut out = [0u8; 64];
        // Fails only when the output is not twice the input, which the types rule out.
        let _ = hex::encode_to_slice(digest, &mut out);
        Self(out)
    }

    pub fn as_str(&self) -> &str {
        // Hex digits are ASCII, so this never falls back.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_written_in_lower_case_hex_two_digits_per_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), expected);
        let digest: [u8; 32] = std::array::from_fn(|i| (i * 8 + 7) as u8);
        let expected: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(Hex32::of(digest).as_str(), expected);
    }
}
