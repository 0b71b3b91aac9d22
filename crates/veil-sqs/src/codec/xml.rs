//! A minimal XML writer for the Query protocol's answers. Escaping is quick-xml's, plus one rule of AWS's: a
//! carriage return in text is written as `&#xD;`, because XML parsers turn a literal CR into LF and the
//! client's MD5 check of the body would then fail.

use quick_xml::escape::escape;

/// Builds one XML document into a string. Elements are closed by the caller in order.
#[derive(Default)]
pub(crate) struct XmlWriter {
    out: String,
}

impl XmlWriter {
    pub(crate) fn new() -> Self {
        Self {
            out: String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        }
    }

    pub(crate) fn open(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
        self
    }

    /// Opens the root element with the SQS namespace.
    pub(crate) fn open_root(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out
            .push_str(" xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">");
        self
    }

    pub(crate) fn close(&mut self, name: &str) -> &mut Self {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
        self
    }

    pub(crate) fn text(&mut self, text: &str) -> &mut Self {
        let escaped = escape(text);
        if escaped.contains('\r') {
            self.out.push_str(&escaped.replace('\r', "&#xD;"));
        } else {
            self.out.push_str(&escaped);
        }
        self
    }

    /// `<name>text</name>`.
    pub(crate) fn leaf(&mut self, name: &str, text: &str) -> &mut Self {
        self.open(name).text(text).close(name)
    }

    /// `<name/>`.
    pub(crate) fn empty(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push_str("/>");
        self
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_carriage_returns_survive_parsing() {
        let mut xml = XmlWriter::new();
        xml.leaf("Body", "a<b>&\"c'\r\n");
        let out = xml.finish();
        assert!(
            out.ends_with("<Body>a&lt;b&gt;&amp;&quot;c&apos;&#xD;\n</Body>"),
            "{out}"
        );
    }
}
