//! Service properties (`?restype=service&comp=properties`): the document Azure keeps per account — logging,
//! metrics and CORS rules. Veil does no logging or metrics of this kind, but keeps what clients set and
//! answers it back, and it does enforce the CORS rules for preflight requests. A Set replaces only the
//! top-level sections it contains, as Azure does.

use super::xml::{self, Element};

/// Sections of a document nobody has set yet.
const DEFAULT_PROPERTIES: &str = "<StorageServiceProperties>\
<Logging><Version>1.0</Version><Read>false</Read><Write>false</Write><Delete>false</Delete>\
<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>\
<HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics>\
<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>\
<Cors /></StorageServiceProperties>";

pub fn default_properties() -> Element {
    xml::parse(DEFAULT_PROPERTIES.as_bytes())
        .unwrap_or_else(|_| Element::new("StorageServiceProperties"))
}

/// `current` with every top-level section that `update` contains replaced by `update`'s.
pub fn merge(current: &Element, update: &Element) -> Element {
    let mut merged = current.clone();
    for section in &update.children {
        match merged.children.iter_mut().find(|c| c.name == section.name) {
            Some(existing) => *existing = section.clone(),
            None => merged.children.push(section.clone()),
        }
    }
    merged
}

pub fn to_document(properties: &Element) -> String {
    let mut out = xml::writer();
    properties.write(&mut out);
    out.finish()
}

/// One CORS rule of the properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorsRule {
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub max_age_s: u64,
}

fn list(element: &Element, name: &str) -> Vec<String> {
    element
        .child_text(name)
        .unwrap_or_default()
        .split(',')
        .map(|item| item.trim().to_string())
        .filter(|item| !item.is_empty())
        .collect()
}

pub fn cors_rules(properties: &Element) -> Vec<CorsRule> {
    let Some(cors) = properties.child("Cors") else {
        return Vec::new();
    };
    cors.children_named("CorsRule")
        .map(|rule| CorsRule {
            allowed_origins: list(rule, "AllowedOrigins"),
            allowed_methods: list(rule, "AllowedMethods")
                .into_iter()
                .map(|m| m.to_ascii_uppercase())
                .collect(),
            allowed_headers: list(rule, "AllowedHeaders")
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            max_age_s: rule
                .child_text("MaxAgeInSeconds")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        })
        .collect()
}

/// Whether a header pattern (`x-ms-meta-*` style prefix or an exact name) allows a header.
fn header_allowed(patterns: &[String], header: &str) -> bool {
    patterns.iter().any(|p| {
        p == "*"
            || p == header
            || p.strip_suffix('*')
                .is_some_and(|prefix| header.starts_with(prefix))
    })
}

/// The first rule that allows the origin, the method and every requested header (Azure's order).
pub fn matching_rule<'a>(
    rules: &'a [CorsRule],
    origin: &str,
    method: &str,
    headers: &[String],
) -> Option<&'a CorsRule> {
    rules.iter().find(|rule| {
        rule.allowed_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
            && rule.allowed_methods.iter().any(|m| m == method)
            && headers
                .iter()
                .all(|h| header_allowed(&rule.allowed_headers, h))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_replaces_only_the_sections_it_contains() {
        let update = xml::parse(
            b"<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>https://a.example</AllowedOrigins>\
<AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders>x-ms-meta-*</AllowedHeaders><ExposedHeaders></ExposedHeaders>\
<MaxAgeInSeconds>60</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>",
        )
        .unwrap();
        let merged = merge(&default_properties(), &update);
        assert!(merged.child("Logging").is_some(), "untouched sections stay");
        let rules = cors_rules(&merged);
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].max_age_s, 60);
        let allowed = ["x-ms-meta-color".to_string()];
        assert!(matching_rule(&rules, "https://a.example", "PUT", &allowed).is_some());
        assert!(matching_rule(&rules, "https://b.example", "PUT", &allowed).is_none());
        assert!(matching_rule(&rules, "https://a.example", "DELETE", &[]).is_none());
        assert!(matching_rule(&rules, "https://a.example", "GET", &["x-other".into()]).is_none());
    }

    #[test]
    fn no_cors_rules_by_default() {
        assert!(cors_rules(&default_properties()).is_empty());
        assert!(to_document(&default_properties()).contains("<Cors />"));
    }
}
