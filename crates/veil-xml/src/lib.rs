//! veil-xml: the XML writer that both XML-speaking front-ends answer with (SQS's Query protocol and Azure
//! Queue Storage). Escaping is quick-xml's plus one rule both services follow: a carriage return in text is
//! written as `&#xD;`, because XML parsers turn a literal CR into LF, and a body must come back byte for byte
//! (SQS clients check its MD5; a body sent through another protocol must read back unchanged). Each protocol
//! names its own [`Style`], so each keeps the exact bytes its real service writes.
//!
//! It also holds XML 1.0's character rule ([`is_xml_char`]), which both front-ends share: what a request
//! document may hold, and what an answer may carry. A document is well-formed whatever was stored: text the
//! writer is given with a character XML 1.0 cannot carry (a NUL a KubeMQ client sent) is written with
//! U+FFFD in its place ([`xml_chars`]; docs/semantics.md §7), never raw, since one such character makes the
//! whole answer unreadable to every client.

use std::borrow::Cow;
use std::fmt::Write as _;

use quick_xml::escape::escape;

/// What differs between the services' documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// The XML declaration that opens every document.
    pub declaration: &'static str,
    /// How an empty element ends: `/>` or ` />`.
    pub empty_end: &'static str,
}

/// Builds one XML document into a string. Elements are closed by the caller in order.
pub struct XmlWriter {
    out: String,
    style: Style,
}

impl XmlWriter {
    pub fn new(style: Style) -> Self {
        Self::with_capacity(style, 0)
    }

    /// A writer whose buffer holds `bytes` of document before it grows, for a caller that knows roughly how
    /// long its answer is (bodies, receipts).
    pub fn with_capacity(style: Style, bytes: usize) -> Self {
        let mut out = String::with_capacity(style.declaration.len() + bytes);
        out.push_str(style.declaration);
        Self { out, style }
    }

    pub fn open(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
        self
    }

    /// Opens an element with one attribute (a namespace, a service endpoint).
    pub fn open_with(&mut self, name: &str, attribute: &str, value: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.attribute_and_end(attribute, value)
    }

    /// Opens an element whose name is `prefix` followed by `suffix` (`SendMessage` + `Response`), with one
    /// attribute, without building the name first.
    pub fn open_joined_with(
        &mut self,
        (prefix, suffix): (&str, &str),
        attribute: &str,
        value: &str,
    ) -> &mut Self {
        self.out.push('<');
        self.out.push_str(prefix);
        self.out.push_str(suffix);
        self.attribute_and_end(attribute, value)
    }

    fn attribute_and_end(&mut self, attribute: &str, value: &str) -> &mut Self {
        self.out.push(' ');
        self.out.push_str(attribute);
        self.out.push_str("=\"");
        self.out.push_str(&escape(&*xml_chars(value)));
        self.out.push_str("\">");
        self
    }

    /// Opens an element whose name is `prefix` followed by `suffix`.
    pub fn open_joined(&mut self, (prefix, suffix): (&str, &str)) -> &mut Self {
        self.out.push('<');
        self.out.push_str(prefix);
        self.out.push_str(suffix);
        self.out.push('>');
        self
    }

    /// Closes an element opened with [`XmlWriter::open_joined`].
    pub fn close_joined(&mut self, (prefix, suffix): (&str, &str)) -> &mut Self {
        self.out.push_str("</");
        self.out.push_str(prefix);
        self.out.push_str(suffix);
        self.out.push('>');
        self
    }

    pub fn close(&mut self, name: &str) -> &mut Self {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
        self
    }

    /// Escaped text; a character XML 1.0 cannot carry is written as U+FFFD ([`xml_chars`]).
    pub fn text(&mut self, text: &str) -> &mut Self {
        let text = xml_chars(text);
        let escaped = escape(&*text);
        let mut lines = escaped.split('\r');
        if let Some(first) = lines.next() {
            self.out.push_str(first);
        }
        for line in lines {
            self.out.push_str("&#xD;");
            self.out.push_str(line);
        }
        self
    }

    /// `<name>text</name>`.
    pub fn leaf(&mut self, name: &str, text: &str) -> &mut Self {
        self.open(name).text(text).close(name)
    }

    /// `<name>value</name>` for an integer, written straight into the document.
    pub fn leaf_int(&mut self, name: &str, value: impl Into<i128>) -> &mut Self {
        self.open(name);
        // Writing into a String cannot fail.
        let _ = write!(self.out, "{}", value.into());
        self.close(name)
    }

    /// `<name>…</name>` with text that `write` appends to the document itself. The text is not escaped, so
    /// this is for text that never needs it — digits, base64, dates — and saves building it apart first.
    pub fn leaf_unescaped(&mut self, name: &str, write: impl FnOnce(&mut String)) -> &mut Self {
        self.open(name);
        write(&mut self.out);
        self.close(name)
    }

    /// `<name/>` or `<name />`, as the style says.
    pub fn empty(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push_str(self.style.empty_end);
        self
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// XML 1.0's `Char` production: #x9 | #xA | #xD | #x20–#xD7FF | #xE000–#xFFFD | #x10000–#x10FFFF (a Rust
/// `char` already excludes the surrogates). The set a well-formed document may hold, raw or as a character
/// reference, and the set SQS accepts in bodies and attribute values.
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Whether every character of `text` is an [`is_xml_char`], settled on bytes for almost every text: a `&str`
/// holds no surrogates, so beyond the control characters the only characters refused are U+FFFE and U+FFFF,
/// whose UTF-8 begins with 0xEF. Only text with such a byte is decoded. One pass over the bytes, in blocks
/// folded without a branch per byte so that the compiler vectorizes it: this runs over every body sent and
/// every text written (docs/benchmarks.md, "Instructions per message").
pub fn is_xml_text(text: &str) -> bool {
    let mut controls_allowed = true;
    let mut has_ef = false;
    for block in text.as_bytes().chunks(VALIDATION_BLOCK_BYTES) {
        let (refused, ef) = block.iter().fold((false, false), |(refused, ef), &b| {
            let control = (b < 0x20) & (b != b'\t') & (b != b'\n') & (b != b'\r');
            (refused | control, ef | (b == 0xEF))
        });
        if refused {
            controls_allowed = false;
            break;
        }
        has_ef |= ef;
    }
    controls_allowed && (!has_ef || text.chars().all(is_xml_char))
}

/// Bytes checked between early exits in [`is_xml_text`]: long enough to vectorize, short enough that a
/// refused text stops soon.
const VALIDATION_BLOCK_BYTES: usize = 256;

/// `text` with each character XML 1.0 cannot carry replaced by U+FFFD, the character a lossy UTF-8 decoder
/// puts for bytes it cannot read: so a stored body another protocol sent shows the same way whether its odd
/// bytes are not UTF-8 or are characters XML refuses. Borrowed, without a copy, when there is none.
pub fn xml_chars(text: &str) -> Cow<'_, str> {
    if is_xml_text(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if is_xml_char(c) {
                    c
                } else {
                    char::REPLACEMENT_CHARACTER
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const STYLE: Style = Style {
        declaration: "<?xml version=\"1.0\"?>",
        empty_end: " />",
    };

    #[test]
    fn text_is_escaped_and_carriage_returns_become_character_references() {
        let mut xml = XmlWriter::new(STYLE);
        xml.leaf("Body", "a<b>&\"c'\r\n");
        assert_eq!(
            xml.finish(),
            "<?xml version=\"1.0\"?><Body>a&lt;b&gt;&amp;&quot;c&apos;&#xD;\n</Body>"
        );
    }

    #[test]
    fn joined_names_integers_and_unescaped_text_are_written_in_place() {
        let mut xml = XmlWriter::with_capacity(STYLE, 64);
        xml.open_joined_with(("Send", "Response"), "xmlns", "urn:a&b")
            .open_joined(("Send", "Result"))
            .leaf_int("Moved", -12i64)
            .leaf_unescaped("Digest", |out| out.push_str("AQID"))
            .close_joined(("Send", "Result"))
            .close_joined(("Send", "Response"));
        assert_eq!(
            xml.finish(),
            "<?xml version=\"1.0\"?><SendResponse xmlns=\"urn:a&amp;b\"><SendResult><Moved>-12</Moved>\
<Digest>AQID</Digest></SendResult></SendResponse>"
        );
    }

    #[test]
    fn every_carriage_return_becomes_a_character_reference() {
        let mut xml = XmlWriter::new(STYLE);
        xml.leaf("Body", "\r\ra\r");
        assert_eq!(
            xml.finish(),
            "<?xml version=\"1.0\"?><Body>&#xD;&#xD;a&#xD;</Body>"
        );
    }

    #[test]
    fn elements_attributes_and_empty_elements_follow_the_style() {
        let mut xml = XmlWriter::new(STYLE);
        xml.open_with("Root", "xmlns", "urn:a&b")
            .empty("None")
            .close("Root");
        assert_eq!(
            xml.finish(),
            "<?xml version=\"1.0\"?><Root xmlns=\"urn:a&amp;b\"><None /></Root>"
        );
    }

    #[test]
    fn characters_xml_cannot_carry_are_written_as_the_replacement_character() {
        let mut xml = XmlWriter::new(STYLE);
        xml.open_with("Root", "Name", "a\u{0}b")
            .leaf("Body", "x\u{0}\u{1}\t\n\u{1F}y\u{FFFE}\u{FFFF}z\u{FFFD}é")
            .close("Root");
        assert_eq!(
            xml.finish(),
            "<?xml version=\"1.0\"?><Root Name=\"a\u{FFFD}b\"><Body>x\u{FFFD}\u{FFFD}\t\n\u{FFFD}y\u{FFFD}\u{FFFD}z\u{FFFD}é</Body></Root>"
        );
    }

    #[test]
    fn text_xml_can_carry_is_borrowed_unchanged() {
        let text = "plain <text> with \t\r\n, ünïcode, \u{E000}\u{FFFD}\u{10FFFF}";
        assert!(matches!(xml_chars(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn a_refused_character_is_found_in_any_block_of_a_long_body() {
        let long = "a".repeat(3 * VALIDATION_BLOCK_BYTES);
        assert!(is_xml_text(&long));
        for at in [
            0,
            VALIDATION_BLOCK_BYTES - 1,
            VALIDATION_BLOCK_BYTES,
            long.len() - 1,
        ] {
            for refused in ["\u{1}", "\u{FFFE}", "\u{FFFF}"] {
                let text = format!("{}{refused}{}", &long[..at], &long[at..]);
                assert!(!is_xml_text(&text), "{refused:?} at byte {at}");
            }
            let allowed = format!("{}\u{FFFD}\t{}", &long[..at], &long[at..]);
            assert!(is_xml_text(&allowed), "U+FFFD and a tab at byte {at}");
        }
    }

    #[test]
    fn the_byte_check_agrees_with_the_character_rule_for_every_character() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            for text in [c.to_string(), format!("ab{c}"), format!("{c}\u{E9}x")] {
                assert_eq!(
                    is_xml_text(&text),
                    text.chars().all(is_xml_char),
                    "U+{:04X} in {text:?}",
                    c as u32
                );
            }
        }
    }

    #[test]
    fn the_control_characters_and_the_two_noncharacters_are_refused() {
        assert!(!is_xml_char('\u{0}') && !is_xml_char('\u{B}') && !is_xml_char('\u{FFFE}'));
        assert!(is_xml_char('\t') && is_xml_char('\u{7F}') && is_xml_char('\u{10000}'));
    }
}
