//! Service properties (`?restype=service&comp=properties`): the document Azure keeps per account — logging,
//! metrics and CORS rules. Veil does no logging or metrics of this kind, but validates what clients set as
//! Azure does ([`validate`]), keeps it and answers it back, and it enforces the CORS rules: preflight
//! requests ([`matching_rule`]) and the `Access-Control-*` headers of actual responses
//! ([`actual_response_headers`]). A Set replaces only the top-level sections it contains, as Azure does.

use super::xml::{self, Element};
use crate::error::{AzureError, AzureResult, ErrorCode};
use crate::limits;

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
    pub exposed_headers: Vec<String>,
    pub max_age_s: u64,
}

impl CorsRule {
    fn allows_any_origin(&self) -> bool {
        self.allowed_origins.iter().any(|o| o == "*")
    }

    fn allows_origin(&self, origin: &str) -> bool {
        self.allowed_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
    }

    fn allows_method(&self, method: &str) -> bool {
        self.allowed_methods.iter().any(|m| m == method)
    }
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
            exposed_headers: list(rule, "ExposedHeaders"),
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
        rule.allows_origin(origin)
            && rule.allows_method(method)
            && headers
                .iter()
                .all(|h| header_allowed(&rule.allowed_headers, h))
    })
}

/// The CORS headers of an actual (not preflight) response to `method`, by the table of Azure's "CORS support
/// for the Azure Storage services" (first rule allowing the origin and the method wins; request headers are
/// not evaluated):
/// - no rules: none;
/// - a rule allowing any origin (`*`) matches: `Access-Control-Allow-Origin: *` and the rule's exposed
///   headers (also for a request without `Origin`), no `Vary`;
/// - a rule naming the request's origin matches: that origin, `Access-Control-Allow-Credentials: true`, the
///   exposed headers and `Vary: Origin`;
/// - no rule matches: only `Vary: Origin`, so that a cache never serves this answer to another origin.
///
/// `Vary` is sent for GET and HEAD only: browsers cache no other answers.
pub fn actual_response_headers(
    rules: &[CorsRule],
    origin: Option<&str>,
    method: &str,
) -> Vec<(&'static str, String)> {
    if rules.is_empty() {
        return Vec::new();
    }
    let rule = rules.iter().find(|rule| {
        rule.allows_method(method)
            && match origin {
                Some(origin) => rule.allows_origin(origin),
                None => rule.allows_any_origin(),
            }
    });
    let mut headers = Vec::new();
    let vary = matches!(method, "GET" | "HEAD");
    match (rule, origin) {
        (Some(rule), _) if rule.allows_any_origin() => {
            headers.push(("access-control-allow-origin", "*".to_string()));
            push_exposed(&mut headers, rule);
        }
        (Some(rule), Some(origin)) => {
            headers.push(("access-control-allow-origin", origin.to_string()));
            headers.push(("access-control-allow-credentials", "true".to_string()));
            push_exposed(&mut headers, rule);
            if vary {
                headers.push(("vary", "Origin".to_string()));
            }
        }
        _ if vary => headers.push(("vary", "Origin".to_string())),
        _ => {}
    }
    headers
}

fn push_exposed(headers: &mut Vec<(&'static str, String)>, rule: &CorsRule) {
    if !rule.exposed_headers.is_empty() {
        headers.push((
            "access-control-expose-headers",
            rule.exposed_headers.join(","),
        ));
    }
}

/// Azure's answer to a well-formed document with a value it refuses: 400 InvalidXmlDocument with
/// `LineNumber` and `LinePosition` 0 and a `Reason` (the Queue service answers so for an ACL whose `Id` is
/// too long; its Set Service Properties documentation names the rules below and their 400).
fn refused(reason: impl Into<String>) -> AzureError {
    AzureError::new(ErrorCode::InvalidXmlDocument)
        .detail("LineNumber", 0)
        .detail("LinePosition", 0)
        .detail("Reason", reason.into())
}

/// The sections whose `RetentionPolicy` keeps data for `Days` (`Metrics` is the 2012-02-12 name).
const RETENTION_SECTIONS: [&str; 4] = ["Logging", "Metrics", "HourMetrics", "MinuteMetrics"];

/// The rules Azure's Set Queue Service Properties applies to a document: a retention policy that is enabled
/// names its days, and days are 1–365; at most five CORS rules, each with origins, methods from Azure's
/// list and a whole number of seconds for `MaxAgeInSeconds`.
pub fn validate(document: &Element) -> AzureResult<()> {
    for section in RETENTION_SECTIONS {
        if let Some(policy) = document
            .child(section)
            .and_then(|s| s.child("RetentionPolicy"))
        {
            validate_retention(section, policy)?;
        }
    }
    match document.child("Cors") {
        Some(cors) => validate_cors(cors),
        None => Ok(()),
    }
}

fn validate_retention(section: &str, policy: &Element) -> AzureResult<()> {
    let enabled = policy
        .child_text("Enabled")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let days = policy.child_text("Days").map(str::trim);
    match days {
        None if enabled => Err(refused(format!(
            "{section} RetentionPolicy is enabled without Days"
        ))),
        None => Ok(()),
        Some(text) => match text.parse::<u32>() {
            Ok(days) if limits::RETENTION_DAYS.contains(&days) => Ok(()),
            _ => Err(refused(format!(
                "{section} RetentionPolicy Days must be {}..={} (was {text})",
                limits::RETENTION_DAYS.start(),
                limits::RETENTION_DAYS.end()
            ))),
        },
    }
}

fn validate_cors(cors: &Element) -> AzureResult<()> {
    let rules: Vec<&Element> = cors.children_named("CorsRule").collect();
    if rules.len() > limits::CORS_RULES_MAX {
        return Err(refused(format!(
            "at most {} CorsRule elements are allowed (got {})",
            limits::CORS_RULES_MAX,
            rules.len()
        )));
    }
    rules.into_iter().try_for_each(validate_cors_rule)
}

fn validate_cors_rule(rule: &Element) -> AzureResult<()> {
    if list(rule, "AllowedOrigins").is_empty() {
        return Err(refused("a CorsRule needs AllowedOrigins"));
    }
    let methods = list(rule, "AllowedMethods");
    if methods.is_empty() {
        return Err(refused("a CorsRule needs AllowedMethods"));
    }
    if let Some(method) = methods
        .iter()
        .find(|m| !limits::CORS_METHODS.contains(&m.to_ascii_uppercase().as_str()))
    {
        return Err(refused(format!(
            "{method} is not a CORS method Azure allows"
        )));
    }
    match rule.child_text("MaxAgeInSeconds").map(str::trim) {
        Some(age) if age.parse::<u32>().is_ok() => Ok(()),
        _ => Err(refused("a CorsRule needs a whole MaxAgeInSeconds")),
    }
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

    fn rule(origins: &str, methods: &str, exposed: &str) -> CorsRule {
        CorsRule {
            allowed_origins: origins.split(',').map(str::to_string).collect(),
            allowed_methods: methods.split(',').map(str::to_string).collect(),
            allowed_headers: Vec::new(),
            exposed_headers: exposed.split(',').map(str::to_string).collect(),
            max_age_s: 0,
        }
    }

    fn names(headers: &[(&'static str, String)]) -> Vec<&'static str> {
        headers.iter().map(|(name, _)| *name).collect()
    }

    #[test]
    fn actual_responses_follow_azures_cors_table() {
        let exact = [rule("https://a.example", "GET,PUT", "x-ms-meta-*")];
        assert!(actual_response_headers(&[], Some("https://a.example"), "GET").is_empty());
        assert_eq!(
            actual_response_headers(&exact, Some("https://a.example"), "GET"),
            vec![
                (
                    "access-control-allow-origin",
                    "https://a.example".to_string()
                ),
                ("access-control-allow-credentials", "true".to_string()),
                ("access-control-expose-headers", "x-ms-meta-*".to_string()),
                ("vary", "Origin".to_string()),
            ]
        );
        assert_eq!(
            names(&actual_response_headers(
                &exact,
                Some("https://a.example"),
                "PUT"
            )),
            [
                "access-control-allow-origin",
                "access-control-allow-credentials",
                "access-control-expose-headers"
            ],
            "no Vary on a PUT"
        );
        assert_eq!(
            names(&actual_response_headers(
                &exact,
                Some("https://b.example"),
                "GET"
            )),
            ["vary"]
        );
        assert_eq!(
            names(&actual_response_headers(&exact, None, "GET")),
            ["vary"]
        );
        assert!(actual_response_headers(&exact, Some("https://a.example"), "DELETE").is_empty());
        let wildcard = [rule("*", "GET", "*")];
        for origin in [Some("https://b.example"), None] {
            assert_eq!(
                actual_response_headers(&wildcard, origin, "GET"),
                vec![
                    ("access-control-allow-origin", "*".to_string()),
                    ("access-control-expose-headers", "*".to_string()),
                ]
            );
        }
    }

    fn document(body: &str) -> Element {
        xml::parse(
            format!("<StorageServiceProperties>{body}</StorageServiceProperties>").as_bytes(),
        )
        .unwrap()
    }

    fn retention(days: &str) -> Element {
        document(&format!(
            "<Logging><RetentionPolicy><Enabled>true</Enabled>{days}</RetentionPolicy></Logging>"
        ))
    }

    fn cors(count: usize, methods: &str) -> Element {
        let rule = format!(
            "<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>{methods}</AllowedMethods>\
<AllowedHeaders /><ExposedHeaders /><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule>"
        );
        document(&format!("<Cors>{}</Cors>", rule.repeat(count)))
    }

    #[test]
    fn validation_refuses_what_azure_refuses_with_invalid_xml_document() {
        for accepted in [
            retention("<Days>1</Days>"),
            retention("<Days>365</Days>"),
            cors(5, "GET,put,MERGE"),
            document("<Cors />"),
            default_properties(),
        ] {
            validate(&accepted).unwrap();
        }
        for refused in [
            retention("<Days>0</Days>"),
            retention("<Days>366</Days>"),
            retention("<Days>seven</Days>"),
            retention(""),
            cors(6, "GET"),
            cors(1, "GET,FETCH"),
            cors(1, ""),
        ] {
            let error = validate(&refused).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidXmlDocument);
            assert_eq!(error.code.status(), 400);
            assert!(error.details.iter().any(|(name, _)| *name == "Reason"));
        }
    }
}
