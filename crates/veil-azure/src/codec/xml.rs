//! XML both ways, as small as Azure's bodies need. Reading builds a tree of elements (names without
//! namespace prefixes, text with entities and character references resolved, CDATA kept verbatim) and refuses
//! a document that is not well-formed, including one holding a character XML 1.0 forbids, raw or as a
//! reference (Azure's 400 InvalidXmlDocument); writing uses the writer shared with the SQS front-end
//! (`veil-xml`) in Azure's style, which never writes such a character.

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;
use quick_xml::Reader;
use veil_xml::Style;
pub use veil_xml::XmlWriter;

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

/// Appends the character or predefined entity a reference (`&#x41;`, `&amp;`) stands for.
fn push_reference(
    current: &mut Element,
    reference: &quick_xml::events::BytesRef<'_>,
) -> Result<(), XmlError> {
    match reference.resolve_char_ref() {
        // A reference to a character XML 1.0 forbids (`&#x1;`) is not well-formed, as the raw character is not.
        Ok(Some(ch)) if !veil_xml::is_xml_char(ch) => {
            return Err(XmlError(format!(
                "character reference to U+{:04X}, which XML 1.0 does not allow",
                ch as u32
            )))
        }
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
    Ok(())
}

/// Parses a whole document into its root element.
pub fn parse(bytes: &[u8]) -> Result<Element, XmlError> {
    let text = std::str::from_utf8(bytes).map_err(|e| XmlError(format!("not UTF-8: {e}")))?;
    // A document holding a character outside XML 1.0's set (a NUL, another C0 control, U+FFFE) is not
    // well-formed, wherever it is; Azure refuses it, and one stored would break every answer that shows it.
    if !veil_xml::is_xml_text(text) {
        let at = text
            .char_indices()
            .find(|(_, c)| !veil_xml::is_xml_char(*c))
            .map_or(0, |(at, _)| at);
        return Err(XmlError(format!(
            "at byte {at}: a character XML 1.0 does not allow"
        )));
    }
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
                push_reference(current, &reference)?;
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

/// The document shape of Azure's answers (lower-case encoding label, `<Name />`).
const AZURE_XML: Style = Style {
    declaration: "<?xml version=\"1.0\" encoding=\"utf-8\"?>",
    empty_end: " />",
};

/// A writer for one Azure XML document.
pub fn writer() -> XmlWriter {
    XmlWriter::new(AZURE_XML)
}

/// A writer in Azure's style whose buffer holds `bytes` before it grows.
pub fn writer_with_capacity(bytes: usize) -> XmlWriter {
    XmlWriter::with_capacity(AZURE_XML, bytes)
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
    fn characters_xml_forbids_are_refused_raw_or_as_references() {
        for refused in [
            &b"<a>x\x00y</a>"[..],
            b"<a>\x01</a>",
            b"<a>\x1f</a>",
            b"<a>\xef\xbf\xbe</a>",
            b"<a>\xef\xbf\xbf</a>",
            b"<a><![CDATA[\x02]]></a>",
            b"<a b=\"\x00\"/>",
            b"<a>&#0;</a>",
            b"<a>&#x1;</a>",
            b"<a>&#8;</a>",
            b"<a>&#x1F;</a>",
            b"<a>&#xFFFE;</a>",
            b"<a>&#65535;</a>",
            b"<a>&#xD800;</a>",
        ] {
            assert!(
                parse(refused).is_err(),
                "{:?}",
                String::from_utf8_lossy(refused)
            );
        }
        let allowed = parse(b"<a>\t\n&#x9;&#xA;&#xD;&#x7F;&#xFFFD;&#x10000;</a>").unwrap();
        assert_eq!(allowed.text, "\t\n\t\n\r\u{7F}\u{FFFD}\u{10000}");
    }

    #[test]
    fn text_is_escaped_and_carriage_returns_survive_parsing() {
        let mut xml = writer();
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
        let mut out = writer();
        doc.write(&mut out);
        assert_eq!(parse(out.finish().as_bytes()).unwrap(), doc);
    }
}
