//! veil-xml: the XML writer that both XML-speaking front-ends answer with (SQS's Query protocol and Azure
//! Queue Storage). Escaping is quick-xml's plus one rule both services follow: a carriage return in text is
//! written as `&#xD;`, because XML parsers turn a literal CR into LF, and a body must come back byte for byte
//! (SQS clients check its MD5; a body sent through another protocol must read back unchanged). Each protocol
//! names its own [`Style`], so each keeps the exact bytes its real service writes.

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
        self.out.push_str(&escape(value));
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

    pub fn text(&mut self, text: &str) -> &mut Self {
        let escaped = escape(text);
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
}
