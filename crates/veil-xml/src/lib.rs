//! veil-xml: the XML writer that both XML-speaking front-ends answer with (SQS's Query protocol and Azure
//! Queue Storage). Escaping is quick-xml's plus one rule both services follow: a carriage return in text is
//! written as `&#xD;`, because XML parsers turn a literal CR into LF, and a body must come back byte for byte
//! (SQS clients check its MD5; a body sent through another protocol must read back unchanged). Each protocol
//! names its own [`Style`], so each keeps the exact bytes its real service writes.

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
        Self {
            out: String::from(style.declaration),
            style,
        }
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
        self.out.push(' ');
        self.out.push_str(attribute);
        self.out.push_str("=\"");
        self.out.push_str(&escape(value));
        self.out.push_str("\">");
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
        if escaped.contains('\r') {
            self.out.push_str(&escaped.replace('\r', "&#xD;"));
        } else {
            self.out.push_str(&escaped);
        }
        self
    }

    /// `<name>text</name>`.
    pub fn leaf(&mut self, name: &str, text: &str) -> &mut Self {
        self.open(name).text(text).close(name)
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
