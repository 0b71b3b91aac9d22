//! Where an SQS request lands (docs/semantics.md §7): the region and access key from the SigV4 `Authorization` header, the
//! account from the queue URL, and from those the engine namespace. Also the two ways SQS names a queue to
//! clients, URLs and ARNs, in both directions. Signatures are verified elsewhere (`sigv4.rs`, `service/auth.rs`).

use veil_core::{QueueKey, DEFAULT_NAMESPACE};

use crate::error::{SqsError, SqsResult};

/// What the `Credential=` part of a SigV4 `Authorization` header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub access_key: String,
    pub region: String,
}

/// Parses `AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/sqs/aws4_request, SignedHeaders=…, Signature=…`.
/// `None` for anything else (no header, another scheme, a malformed scope).
pub fn parse_authorization(header: &str) -> Option<Credential> {
    let rest = header.trim().strip_prefix("AWS4-HMAC-SHA256")?;
    let credential = rest
        .split(',')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("Credential="))?;
    let mut scope = credential.split('/');
    let access_key = scope.next()?.to_string();
    let _date = scope.next()?;
    let region = scope.next()?.to_string();
    if access_key.is_empty() || !valid_region(&region) {
        return None;
    }
    Some(Credential { access_key, region })
}

/// Whether `region` has the shape of an AWS region name (`us-east-1`, `us-gov-west-1`, `us-isob-east-1`):
/// lower-case letters, digits and hyphens, starting with a letter and not ending with a hyphen, at most
/// [`crate::limits::REGION_CHARS_MAX`] long. A region names a namespace, so nothing else may become one.
pub fn valid_region(region: &str) -> bool {
    let bytes = region.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= crate::limits::REGION_CHARS_MAX
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1] != b'-'
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// An SQS account and region: what a namespace is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountRegion {
    pub account: String,
    pub region: String,
}

/// How accounts and regions map onto engine namespaces.
#[derive(Clone, Debug)]
pub struct NamespaceMap {
    pub default_account: String,
    pub default_region: String,
}

const SQS_NAMESPACE_PREFIX: &str = "sqs:";

/// The pattern of every namespace of one account, in any region: `sqs:<account>:*`.
pub fn account_namespaces(account: &str) -> String {
    format!("{SQS_NAMESPACE_PREFIX}{account}:*")
}

impl NamespaceMap {
    /// The default account in the default region shares Veil's default namespace with the other protocols;
    /// every other account/region is `sqs:<account>:<region>`.
    pub fn namespace(&self, place: &AccountRegion) -> String {
        if place.account == self.default_account && place.region == self.default_region {
            DEFAULT_NAMESPACE.to_string()
        } else {
            format!("{SQS_NAMESPACE_PREFIX}{}:{}", place.account, place.region)
        }
    }

    /// The account and region a namespace stands for. Namespaces made by other protocols (not `sqs:`) are
    /// shown as the default account in `fallback_region`.
    pub fn account_region(&self, namespace: &str, fallback_region: &str) -> AccountRegion {
        if let Some((account, region)) = namespace
            .strip_prefix(SQS_NAMESPACE_PREFIX)
            .and_then(|rest| rest.split_once(':'))
        {
            return AccountRegion {
                account: account.to_string(),
                region: region.to_string(),
            };
        }
        let region = if namespace == DEFAULT_NAMESPACE {
            self.default_region.clone()
        } else {
            fallback_region.to_string()
        };
        AccountRegion {
            account: self.default_account.clone(),
            region,
        }
    }

    pub fn queue_arn(&self, key: &QueueKey, fallback_region: &str) -> String {
        let place = self.account_region(&key.namespace, fallback_region);
        format!(
            "arn:aws:sqs:{}:{}:{}",
            place.region, place.account, key.name
        )
    }

    /// `origin` is `scheme://host[:port]`, without a trailing `/` (formatted into the URL, not allocated).
    pub fn queue_url(
        &self,
        key: &QueueKey,
        origin: impl std::fmt::Display,
        fallback_region: &str,
    ) -> String {
        let place = self.account_region(&key.namespace, fallback_region);
        format!("{origin}/{}/{}", place.account, key.name)
    }

    /// The queue an ARN names: `arn:aws:sqs:<region>:<account>:<name>`.
    pub fn key_from_arn(&self, arn: &str) -> Option<QueueKey> {
        let mut parts = arn.split(':');
        let (Some("arn"), Some(_partition), Some("sqs")) =
            (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let region = parts.next()?;
        let account = parts.next()?;
        let name = parts.next()?;
        if parts.next().is_some() || region.is_empty() || account.is_empty() || name.is_empty() {
            return None;
        }
        let place = AccountRegion {
            account: account.to_string(),
            region: region.to_string(),
        };
        Some(QueueKey::new(self.namespace(&place), name))
    }
}

/// A queue as a URL or a request path names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueAddress {
    /// `None` when the path held only the queue name.
    pub account: Option<String>,
    pub name: String,
}

/// Reads `/<account>/<queue>` (or `/<queue>`) from the last segments of a path.
pub fn parse_queue_path(path: &str) -> Option<QueueAddress> {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [] => None,
        [name] => Some(QueueAddress {
            account: None,
            name: (*name).to_string(),
        }),
        [.., account, name] => Some(QueueAddress {
            account: Some((*account).to_string()),
            name: (*name).to_string(),
        }),
    }
}

/// Reads the queue from a `QueueUrl` parameter. Any host is accepted: clients keep URLs that name another
/// host (a load balancer, a container name); only the path's last two segments matter. A URL that names no
/// queue at all is a queue that does not exist, as SQS answers it (`AWS.SimpleQueueService.NonExistentQueue`
/// for `http://whatever-incorrect-queue-address`, moto's AWS-verified `test_get_queue_attributes_error_not_exists`
/// family), not `InvalidAddress`.
pub fn parse_queue_url(url: &str) -> SqsResult<QueueAddress> {
    let invalid = SqsError::queue_does_not_exist;
    let path = match url.split_once("://") {
        Some((_scheme, rest)) => rest.find('/').map_or("", |slash| &rest[slash..]),
        None => url,
    };
    parse_queue_path(path).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn map() -> NamespaceMap {
        NamespaceMap {
            default_account: "000000000000".into(),
            default_region: "us-east-1".into(),
        }
    }

    #[test]
    fn an_authorization_header_with_a_region_outside_awss_shape_names_no_namespace() {
        for region in ["us\0east-1", "Bad", "a".repeat(33).as_str()] {
            let header = format!(
                "AWS4-HMAC-SHA256 Credential=AKID/20240101/{region}/sqs/aws4_request, SignedHeaders=host, Signature=abc"
            );
            assert_eq!(parse_authorization(&header), None, "{region:?}");
        }
    }

    #[test]
    fn authorization_header_gives_access_key_and_region() {
        let header =
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/eu-west-1/sqs/aws4_request, \
                      SignedHeaders=host;x-amz-date, Signature=abc";
        assert_eq!(
            parse_authorization(header),
            Some(Credential {
                access_key: "AKIDEXAMPLE".into(),
                region: "eu-west-1".into()
            })
        );
        assert_eq!(parse_authorization("Basic abc"), None);
        assert_eq!(parse_authorization("AWS4-HMAC-SHA256 Credential=AK"), None);
    }

    #[test]
    fn default_account_and_region_share_the_default_namespace() {
        let default = AccountRegion {
            account: "000000000000".into(),
            region: "us-east-1".into(),
        };
        assert_eq!(map().namespace(&default), DEFAULT_NAMESPACE);
        let other = AccountRegion {
            account: "123456789012".into(),
            region: "eu-west-1".into(),
        };
        assert_eq!(map().namespace(&other), "sqs:123456789012:eu-west-1");
        assert_eq!(
            map().account_region("sqs:123456789012:eu-west-1", "x"),
            other
        );
    }

    #[test]
    fn arns_round_trip_through_queue_keys() {
        let key = map()
            .key_from_arn("arn:aws:sqs:us-east-1:000000000000:orders")
            .unwrap();
        assert_eq!(key, QueueKey::new(DEFAULT_NAMESPACE, "orders"));
        assert_eq!(
            map().queue_arn(&key, "us-east-1"),
            "arn:aws:sqs:us-east-1:000000000000:orders"
        );
        assert_eq!(map().key_from_arn("arn:aws:sns:us-east-1:1:x"), None);
        assert_eq!(map().key_from_arn("nonsense"), None);
    }

    #[test]
    fn queue_urls_with_any_host_name_account_and_queue() {
        let address = parse_queue_url("https://sqs.elsewhere:4566/123456789012/jobs").unwrap();
        assert_eq!(address.account.as_deref(), Some("123456789012"));
        assert_eq!(address.name, "jobs");
        assert_eq!(
            parse_queue_url("http://localhost:9324/").unwrap_err().code,
            ErrorCode::QueueDoesNotExist
        );
        assert_eq!(parse_queue_url("orders").unwrap().name, "orders");
    }
}
