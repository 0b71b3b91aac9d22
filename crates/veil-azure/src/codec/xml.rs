//! XML both ways, as small as Azure's bodies need. Reading builds a tree of elements (names without
//! namespace prefixes, text with entities and character references resolved, CDATA kept verbatim);
//! writing escapes text with quick-xml plus one rule: a carriage return is written as `&#xD;`, because XML
//! parsers turn a literal CR into LF and a body written by another protocol must come back byte for byte.

use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::Event;
use quick_xml::Reader;

/// Deepest nesting accepted; Azure's documents are at most four levels deep.
const DEPTH_MAX: usize = 16;

/// One element of a parsed document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Element {
    /// Local name (any `prefix:` removed).
    pub name: String,
    /// The element's own text, concatenated.
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    pub fn leaf(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
            children: Vec::new(),
        }
    }

    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The text of a child, if the child exists.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }

    /// Writes the element and its subtree (no XML declaration).
    pub fn write(&self, out: &mut XmlWriter) {
        if self.children.is_empty() && self.text.is_empty() {
            out.empty(&self.name);
            return;
        }
        out.open(&self.name);
        out.text(&self.text);
        for child in &self.children {
            child.write(out);
        }
        out.close(&self.name);
    }
}

fn local_name(raw: &[u8]) -> String {
    let name = String::from_utf8_lossy(raw);
    match name.rsplit_once(':') {
        Some((_, local)) => local.to_string(),
        None => name.into_owned(),
    }
}

/// Why a document was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XmlError(pub String);

/// Parses a whole document into its root element.
pub fn parse(bytes: &[u8]) -> Result<Element, XmlError> {
    let text = std::str::from_utf8(bytes).map_err(|e| XmlError(format!("not UTF-8: {e}")))?;
    let mut reader = Reader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| XmlError(format!("at byte {}: {e}", reader.buffer_position())))?;
        match event {
            Event::Start(start) => {
                if root.is_some() || stack.len() >= DEPTH_MAX {
                    return Err(XmlError("unexpected element".into()));
                }
                stack.push(Element::new(local_name(start.name().as_ref())));
            }
            Event::Empty(start) => {
                let element = Element::new(local_name(start.name().as_ref()));
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None if root.is_none() => root = Some(element),
                    None => return Err(XmlError("more than one root element".into())),
                }
            }
            Event::End(_) => {
                let element = stack
                    .pop()
                    .ok_or_else(|| XmlError("unbalanced end tag".into()))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            }
            Event::Text(text) => {
                let content = text
                    .xml10_content()
                    .map_err(|e| XmlError(format!("text: {e}")))?;
                match stack.last_mut() {
                    Some(current) => current.text.push_str(&content),
                    None if content.trim().is_empty() => {}
                    None => return Err(XmlError("text outside the root element".into())),
                }
            }
            Event::CData(data) => {
                let content = data
                    .xml10_content()
                    .map_err(|e| XmlError(format!("CDATA: {e}")))?;
                let current = stack
                    .last_mut()
                    .ok_or_else(|| XmlError("CDATA outside the root element".into()))?;
                current.text.push_str(&content);
            }
            Event::GeneralRef(reference) => {
                let current = stack
                    .last_mut()
                    .ok_or_else(|| XmlError("reference outside the root element".into()))?;
                match reference.resolve_char_ref() {
                    Ok(Some(ch)) => current.text.push(ch),
                    Ok(None) => {
                        let name = reference
                            .decode()
                            .map_err(|e| XmlError(format!("reference: {e}")))?;
                        let resolved = resolve_predefined_entity(&name)
                            .ok_or_else(|| XmlError(format!("unknown entity &{name};")))?;
                        current.text.push_str(resolved);
                    }
                    Err(e) => return Err(XmlError(format!("character reference: {e}"))),
                }
            }
            Event::Eof => break,
            // Declarations, comments, processing instructions and doctypes carry nothing Azure reads.
            _ => {}
        }
    }
    if !stack.is_empty() {
        return Err(XmlError("unclosed element".into()));
    }
    root.ok_or_else(|| XmlError("no root element".into()))
}

/// Builds one XML document into a string. Elements are closed by the caller in order.
pub struct XmlWriter {
    out: String,
}

impl XmlWriter {
    pub fn new() -> Self {
        Self {
            out: String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>"),
        }
    }

    pub fn open(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
        self
    }

    /// Opens an element with one attribute.
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

    /// `<name />`.
    pub fn empty(&mut self, name: &str) -> &mut Self {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push_str(" />");
        self
    }

    pub fn finish(self) -> String {
        self.out
    }
}

impl Default for XmlWriter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_text_is_unescaped_from_entities_character_references_and_cdata() {
        let doc = parse(
            b"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<QueueMessage><MessageText>a&lt;b&gt;&amp;&quot;&apos;&#x41;&#66;<![CDATA[<raw>]]></MessageText></QueueMessage>",
        )
        .unwrap();
        assert_eq!(doc.name, "QueueMessage");
        assert_eq!(doc.child_text("MessageText"), Some("a<b>&\"'AB<raw>"));
    }

    #[test]
    fn malformed_documents_are_refused() {
        assert!(parse(b"<QueueMessage><MessageText>x</QueueMessage>").is_err());
        assert!(parse(b"").is_err());
        assert!(parse(b"<a/><b/>").is_err());
        assert!(parse(b"<a>&bogus;</a>").is_err());
        assert!(parse(b"\xff\xfe").is_err());
    }

    #[test]
    fn text_is_escaped_and_carriage_returns_survive_parsing() {
        let mut xml = XmlWriter::new();
        xml.leaf("MessageText", "a<b>&\r\n");
        let out = xml.finish();
        assert!(
            out.ends_with("<MessageText>a&lt;b&gt;&amp;&#xD;\n</MessageText>"),
            "{out}"
        );
        let back = parse(out.as_bytes()).unwrap();
        assert_eq!(back.text, "a<b>&\r\n");
    }

    #[test]
    fn a_tree_writes_back_to_equivalent_xml() {
        let doc =
            parse(b"<Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><Empty/></CorsRule></Cors>")
                .unwrap();
        let mut out = XmlWriter::new();
        doc.write(&mut out);
        assert_eq!(parse(out.finish().as_bytes()).unwrap(), doc);
    }
}
