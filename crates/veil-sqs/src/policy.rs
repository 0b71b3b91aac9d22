//! Queue access policies, evaluated (docs/security.md, "SQS"): the `Policy` attribute a queue keeps (written by
//! SetQueueAttributes or by AddPermission) decides what principals of other accounts may do. Pure: a policy
//! document and a request in, a [`Decision`] out.
//!
//! IAM's rules, as far as SQS policies use them: a statement applies when its `Principal`, `Action`,
//! `Resource` and `Condition` all match; an applying `Deny` wins over any `Allow`; nothing applying is an
//! implicit deny. Matching is deliberately narrow and fails closed: an element Veil does not understand
//! (`NotPrincipal`, `NotAction`, `NotResource`, a condition operator or key outside the few listed below, a
//! document that is not JSON) makes its statement not apply — so an unknown `Allow` never opens a queue,
//! though an unknown `Deny` does not close one either.
//!
//! Understood: `Effect` `Allow`/`Deny`; `Action` a string or list, case-insensitive, with `*` wildcards (`*`,
//! `sqs:*`, `SQS:SendMessage`, `sqs:Send*`); `Principal` `"*"`, `{"AWS": …}` with `"*"`, account ids,
//! `arn:aws:iam::<account>:root` or the caller's own ARN, as a string or list; `Resource` the queue ARN with
//! `*` wildcards, a string or list (absent: the queue itself); `Condition` operators `ArnEquals`, `ArnLike`,
//! `StringEquals`, `StringLike` on the keys `aws:SourceArn` and `aws:SourceAccount`.

use serde_json::Value;
use veil_core::Pattern;

/// What a policy says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A statement allows it and none denies it.
    Allow,
    /// A statement denies it explicitly.
    Deny,
    /// No statement applies: denied unless something else allows it.
    NotApplicable,
}

/// The request as a policy sees it.
#[derive(Clone, Debug)]
pub struct PolicyRequest<'a> {
    /// The caller's 12-digit account.
    pub account: &'a str,
    /// The caller's ARN (`arn:aws:iam::<account>:user/<access key>` for Veil's credentials).
    pub principal_arn: &'a str,
    /// The action without its prefix, as SQS's API names it (`SendMessage`; batches are their single action).
    pub action: &'a str,
    /// The queue's ARN.
    pub resource: &'a str,
    /// `aws:SourceArn` and `aws:SourceAccount`: set only when a service acts for someone; Veil's callers have
    /// none, so statements conditioned on them do not apply to them.
    pub source_arn: Option<&'a str>,
    pub source_account: Option<&'a str>,
}

/// Evaluates a policy document; a document that is not a JSON policy decides nothing.
pub fn evaluate(document: &str, request: &PolicyRequest<'_>) -> Decision {
    let Ok(policy) = serde_json::from_str::<Value>(document) else {
        return Decision::NotApplicable;
    };
    let statements: Vec<&Value> = match policy.get("Statement") {
        Some(Value::Array(list)) => list.iter().collect(),
        Some(single @ Value::Object(_)) => vec![single],
        _ => return Decision::NotApplicable,
    };
    let mut allowed = false;
    for statement in statements {
        if !applies(statement, request) {
            continue;
        }
        match statement.get("Effect").and_then(Value::as_str) {
            Some("Deny") => return Decision::Deny,
            Some("Allow") => allowed = true,
            _ => {}
        }
    }
    if allowed {
        Decision::Allow
    } else {
        Decision::NotApplicable
    }
}

fn applies(statement: &Value, request: &PolicyRequest<'_>) -> bool {
    // The negated forms are not evaluated: fail closed.
    if ["NotPrincipal", "NotAction", "NotResource"]
        .iter()
        .any(|element| statement.get(element).is_some())
    {
        return false;
    }
    principal_matches(statement.get("Principal"), request)
        && action_matches(statement.get("Action"), request.action)
        && resource_matches(statement.get("Resource"), request.resource)
        && conditions_hold(statement.get("Condition"), request)
}

/// A string or a list of strings; anything else is `None` (the statement then does not apply).
fn strings(value: &Value) -> Option<Vec<&str>> {
    match value {
        Value::String(text) => Some(vec![text.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

fn principal_matches(principal: Option<&Value>, request: &PolicyRequest<'_>) -> bool {
    let names = match principal {
        Some(Value::String(star)) => return star == "*",
        Some(Value::Object(map)) => match map.get("AWS").and_then(strings) {
            Some(names) => names,
            None => return false,
        },
        _ => return false,
    };
    let root = format!("arn:aws:iam::{}:root", request.account);
    names.iter().any(|name| {
        *name == "*" || *name == request.account || *name == root || *name == request.principal_arn
    })
}

fn action_matches(action: Option<&Value>, name: &str) -> bool {
    let Some(patterns) = action.and_then(strings) else {
        return false;
    };
    let full = format!("sqs:{name}").to_ascii_lowercase();
    patterns.iter().any(|pattern| {
        let pattern = pattern.to_ascii_lowercase();
        pattern == "*" || Pattern::new(pattern).matches(&full)
    })
}

fn resource_matches(resource: Option<&Value>, arn: &str) -> bool {
    match resource {
        None => true,
        Some(value) => strings(value).is_some_and(|patterns| {
            patterns
                .iter()
                .any(|pattern| Pattern::new(*pattern).matches(arn))
        }),
    }
}

fn conditions_hold(condition: Option<&Value>, request: &PolicyRequest<'_>) -> bool {
    let Some(condition) = condition else {
        return true;
    };
    let Some(operators) = condition.as_object() else {
        return false;
    };
    operators.iter().all(|(operator, tests)| {
        let Some(tests) = tests.as_object() else {
            return false;
        };
        tests.iter().all(|(key, expected)| {
            let actual = match key.to_ascii_lowercase().as_str() {
                "aws:sourcearn" => request.source_arn,
                "aws:sourceaccount" => request.source_account,
                _ => return false,
            };
            let (Some(actual), Some(expected)) = (actual, strings(expected)) else {
                return false;
            };
            match operator.as_str() {
                "ArnEquals" | "StringEquals" => expected.contains(&actual),
                "ArnLike" | "StringLike" => expected
                    .iter()
                    .any(|pattern| Pattern::new(*pattern).matches(actual)),
                _ => false,
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUE: &str = "arn:aws:sqs:us-east-1:000000000000:orders";

    fn request(account: &'static str, action: &'static str) -> PolicyRequest<'static> {
        PolicyRequest {
            account,
            principal_arn: "arn:aws:iam::111111111111:user/alice",
            action,
            resource: QUEUE,
            source_arn: None,
            source_account: None,
        }
    }

    fn policy(statements: &str) -> String {
        format!(r#"{{"Version":"2012-10-17","Statement":[{statements}]}}"#)
    }

    #[test]
    fn add_permission_statements_allow_the_named_account_and_actions() {
        let doc = policy(
            r#"{"Sid":"l","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::111111111111:root"},"Action":"SQS:SendMessage","Resource":"arn:aws:sqs:us-east-1:000000000000:orders"}"#,
        );
        assert_eq!(
            evaluate(&doc, &request("111111111111", "SendMessage")),
            Decision::Allow
        );
        assert_eq!(
            evaluate(&doc, &request("111111111111", "ReceiveMessage")),
            Decision::NotApplicable
        );
        assert_eq!(
            evaluate(&doc, &request("222222222222", "SendMessage")),
            Decision::NotApplicable
        );
    }

    #[test]
    fn actions_match_case_insensitively_with_wildcards_and_lists() {
        for action in [
            r#""*""#,
            r#""sqs:*""#,
            r#""sqs:Send*""#,
            r#"["sqs:ReceiveMessage","SQS:sendmessage"]"#,
        ] {
            let doc = policy(&format!(
                r#"{{"Effect":"Allow","Principal":"*","Action":{action},"Resource":"*"}}"#
            ));
            assert_eq!(
                evaluate(&doc, &request("111111111111", "SendMessage")),
                Decision::Allow,
                "{action}"
            );
        }
        let doc = policy(r#"{"Effect":"Allow","Principal":"*","Action":"sqs:Send*"}"#);
        assert_eq!(
            evaluate(&doc, &request("1", "DeleteMessage")),
            Decision::NotApplicable
        );
    }

    #[test]
    fn principals_name_accounts_root_arns_lists_or_anyone() {
        for principal in [
            r#""*""#,
            r#"{"AWS":"*"}"#,
            r#"{"AWS":"111111111111"}"#,
            r#"{"AWS":["222222222222","arn:aws:iam::111111111111:root"]}"#,
            r#"{"AWS":"arn:aws:iam::111111111111:user/alice"}"#,
        ] {
            let doc = policy(&format!(
                r#"{{"Effect":"Allow","Principal":{principal},"Action":"sqs:*","Resource":"{QUEUE}"}}"#
            ));
            assert_eq!(
                evaluate(&doc, &request("111111111111", "SendMessage")),
                Decision::Allow,
                "{principal}"
            );
        }
        let doc = policy(
            r#"{"Effect":"Allow","Principal":{"Service":"sns.amazonaws.com"},"Action":"sqs:*"}"#,
        );
        assert_eq!(
            evaluate(&doc, &request("111111111111", "SendMessage")),
            Decision::NotApplicable
        );
    }

    #[test]
    fn an_explicit_deny_wins_over_any_allow() {
        let doc = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"sqs:*"},{"Effect":"Deny","Principal":{"AWS":"111111111111"},"Action":"sqs:SendMessage","Resource":"arn:aws:sqs:*:*:orders"}"#,
        );
        assert_eq!(
            evaluate(&doc, &request("111111111111", "SendMessage")),
            Decision::Deny
        );
        assert_eq!(
            evaluate(&doc, &request("111111111111", "ReceiveMessage")),
            Decision::Allow
        );
    }

    #[test]
    fn resources_must_match_the_queue_arn() {
        let doc = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"sqs:*","Resource":"arn:aws:sqs:us-east-1:000000000000:invoices"}"#,
        );
        assert_eq!(
            evaluate(&doc, &request("1", "SendMessage")),
            Decision::NotApplicable
        );
    }

    #[test]
    fn conditions_on_source_arn_and_account_apply_only_when_they_hold() {
        let doc = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"sqs:SendMessage","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:sns:*:111111111111:*"},"StringEquals":{"aws:SourceAccount":"111111111111"}}}"#,
        );
        let mut with_source = request("111111111111", "SendMessage");
        assert_eq!(evaluate(&doc, &with_source), Decision::NotApplicable);
        with_source.source_arn = Some("arn:aws:sns:us-east-1:111111111111:topic");
        with_source.source_account = Some("111111111111");
        assert_eq!(evaluate(&doc, &with_source), Decision::Allow);
        with_source.source_account = Some("222222222222");
        assert_eq!(evaluate(&doc, &with_source), Decision::NotApplicable);
    }

    #[test]
    fn unknown_elements_and_operators_fail_closed() {
        for statement in [
            r#"{"Effect":"Allow","Principal":"*","Action":"sqs:*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}"#,
            r#"{"Effect":"Allow","NotPrincipal":{"AWS":"2"},"Action":"sqs:*"}"#,
            r#"{"Effect":"Allow","Principal":"*","NotAction":"sqs:DeleteQueue"}"#,
            r#"{"Effect":"Allow","Principal":"*"}"#,
        ] {
            assert_eq!(
                evaluate(&policy(statement), &request("1", "SendMessage")),
                Decision::NotApplicable,
                "{statement}"
            );
        }
        assert_eq!(
            evaluate("not json", &request("1", "SendMessage")),
            Decision::NotApplicable
        );
        let single = r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"*"}}"#;
        assert_eq!(
            evaluate(single, &request("1", "SendMessage")),
            Decision::Allow
        );
    }
}
