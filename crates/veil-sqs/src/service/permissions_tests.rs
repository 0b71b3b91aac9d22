//! Tests of AddPermission and RemovePermission: the policy edits on their own, the codec on request bytes in
//! both protocols, and whole requests through the router over an in-memory engine. Each is named after the
//! rule it checks.

use axum::body::Body;
use axum::http::StatusCode;
use axum::Router;
use serde_json::{json, Value};

use super::*;
use crate::api::{Action, QueueTarget};
use crate::codec::{self, HttpRequestParts};
use crate::error::refusal;
use crate::service::test_support;

const URL: &str = "http://localhost:9324/000000000000/q";
const ARN: &str = "arn:aws:sqs:us-east-1:000000000000:q";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

/// The statement AddPermission writes for one account and the given actions.
fn granted(label: &str, account: &str, actions: &[&str]) -> Doc {
    statement(
        label,
        principals(&strings(&[account])).unwrap(),
        granted_actions(&strings(actions)).unwrap(),
        ARN,
    )
}

fn invalid(message: &str) -> (ErrorCode, String) {
    (ErrorCode::InvalidParameterValue, message.to_string())
}

// ----- the policy document -----

#[test]
fn a_first_permission_writes_sqs_default_policy_compactly_in_sqs_member_order() {
    let policy = with_statement(
        None,
        "l",
        granted("l", "111111111111", &["SendMessage"]),
        ARN,
    )
    .unwrap();
    assert_eq!(
        policy,
        concat!(
            r#"{"Version":"2008-10-17","Id":"arn:aws:sqs:us-east-1:000000000000:q/SQSDefaultPolicy","#,
            r#""Statement":[{"Sid":"l","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::111111111111:root"},"#,
            r#""Action":"SQS:SendMessage","Resource":"arn:aws:sqs:us-east-1:000000000000:q"}]}"#
        )
    );
}

#[test]
fn several_principals_or_actions_are_lists_in_request_order() {
    let statement = statement(
        "l",
        principals(&strings(&["222222222222", "111111111111"])).unwrap(),
        granted_actions(&strings(&["ReceiveMessage", "*"])).unwrap(),
        ARN,
    );
    let rendered: Value = serde_json::from_str(&statement.to_string()).unwrap();
    assert_eq!(
        rendered["Principal"]["AWS"],
        json!([
            "arn:aws:iam::222222222222:root",
            "arn:aws:iam::111111111111:root"
        ])
    );
    assert_eq!(rendered["Action"], json!(["SQS:ReceiveMessage", "SQS:*"]));
}

#[test]
fn a_second_label_appends_its_statement_after_the_first() {
    let first = with_statement(None, "a", granted("a", "111111111111", &["*"]), ARN).unwrap();
    let both = with_statement(
        Some(&first),
        "b",
        granted("b", "222222222222", &["SendMessage"]),
        ARN,
    )
    .unwrap();
    let policy: Value = serde_json::from_str(&both).unwrap();
    let sids: Vec<&str> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|statement| statement["Sid"].as_str().unwrap())
        .collect();
    assert_eq!(sids, ["a", "b"]);
    assert!(both.starts_with(&first[..first.len() - 2]), "{both}");
}

#[test]
fn a_label_already_in_the_policy_is_refused_and_changes_nothing() {
    let first = with_statement(None, "a", granted("a", "111111111111", &["*"]), ARN).unwrap();
    assert_eq!(
        with_statement(Some(&first), "a", granted("a", "222222222222", &["*"]), ARN),
        Err("Value a for parameter Label is invalid. Reason: Already exists.".to_string())
    );
}

#[test]
fn a_policy_set_by_the_user_keeps_its_members_order_and_statements() {
    // A single statement object (allowed by the policy grammar) becomes a list; the user's member order,
    // including inside the statement, survives the edit.
    let user = r#"{"Statement":{"Sid":"mine","Resource":"*","Effect":"Deny","Principal":"*","Action":"sqs:*","Condition":{"NumericLessThan":{"x":1.5}}},"Version":"2012-10-17"}"#;
    let edited =
        with_statement(Some(user), "l", granted("l", "111111111111", &["*"]), ARN).unwrap();
    let expected_start = r#"{"Statement":[{"Sid":"mine","Resource":"*","Effect":"Deny","Principal":"*","Action":"sqs:*","Condition":{"NumericLessThan":{"x":1.5}}},{"Sid":"l","#;
    assert!(edited.starts_with(expected_start), "{edited}");
    assert!(
        edited.ends_with(r#"}],"Version":"2012-10-17"}"#),
        "{edited}"
    );
    // A user's Sid counts as a label.
    assert_eq!(
        with_statement(
            Some(user),
            "mine",
            granted("mine", "111111111111", &["*"]),
            ARN
        ),
        Err("Value mine for parameter Label is invalid. Reason: Already exists.".to_string())
    );
    // And a policy without statements gets a list.
    let bare = with_statement(
        Some(r#"{"Id":"x"}"#),
        "l",
        granted("l", "111111111111", &["*"]),
        ARN,
    )
    .unwrap();
    assert!(
        bare.starts_with(r#"{"Id":"x","Statement":[{"Sid":"l""#),
        "{bare}"
    );
}

#[test]
fn removing_a_label_keeps_the_other_statements() {
    let first = with_statement(None, "a", granted("a", "111111111111", &["*"]), ARN).unwrap();
    let both =
        with_statement(Some(&first), "b", granted("b", "222222222222", &["*"]), ARN).unwrap();
    assert_eq!(without_statement(Some(&both), "b"), Ok(Some(first)));
}

#[test]
fn removing_the_last_statement_removes_the_policy() {
    let first = with_statement(None, "a", granted("a", "111111111111", &["*"]), ARN).unwrap();
    assert_eq!(without_statement(Some(&first), "a"), Ok(None));
}

#[test]
fn an_unknown_label_is_worded_by_whether_the_queue_has_a_policy() {
    assert_eq!(
        without_statement(None, "x"),
        Err("Value x for parameter Label is invalid. Reason: can't find label.".to_string())
    );
    let first = with_statement(None, "a", granted("a", "111111111111", &["*"]), ARN).unwrap();
    assert_eq!(
        without_statement(Some(&first), "x"),
        Err(
            "Value x for parameter Label is invalid. Reason: can't find label on existing policy."
                .to_string()
        )
    );
}

// ----- the parameter rules -----

#[test]
fn a_label_is_1_to_80_letters_digits_hyphens_or_underscores() {
    assert_eq!(check_label("Alice_Send-1"), Ok(()));
    assert_eq!(check_label(&"a".repeat(80)), Ok(()));
    let rule =
        "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.";
    for bad in [
        "a".repeat(81),
        "a b".to_string(),
        "é".to_string(),
        "a.b".to_string(),
    ] {
        assert_eq!(
            refusal(check_label(&bad)),
            invalid(&format!(
                "Value {bad} for parameter Label is invalid. Reason: {rule}"
            )),
            "{bad}"
        );
    }
}

#[test]
fn principals_are_12_digit_accounts_as_iam_root_arns() {
    assert_eq!(
        principals(&strings(&["123456789012"])),
        Ok(strings(&["arn:aws:iam::123456789012:root"]))
    );
    assert_eq!(
        refusal(principals(&[])),
        invalid("Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.")
    );
    assert_eq!(
        refusal(principals(&strings(&[
            "123456789012",
            "abc",
            "arn:aws:iam::123456789012:user/x"
        ]))),
        invalid(
            "Value [abc, arn:aws:iam::123456789012:user/x] for parameter PrincipalId is invalid. \
             Reason: Unable to verify."
        )
    );
}

#[test]
fn at_most_7_actions_are_granted_in_one_statement() {
    let seven = strings(&["SendMessage"; 7]);
    assert_eq!(granted_actions(&seven).map(|actions| actions.len()), Ok(7));
    let eight = strings(&["SendMessage"; 8]);
    assert_eq!(
        refusal(granted_actions(&eight)),
        (
            ErrorCode::OverLimit,
            "8 Actions were found, maximum allowed is 7.".to_string()
        )
    );
}

#[test]
fn only_actions_another_account_may_call_are_granted() {
    for action in GRANTABLE_ACTIONS {
        assert_eq!(
            granted_actions(&strings(&[action])),
            Ok(vec![format!("SQS:{action}")])
        );
    }
    assert_eq!(
        refusal(granted_actions(&strings(&[
            "SendMessage",
            "RemovePermission"
        ]))),
        invalid(
            "Value SQS:RemovePermission for parameter ActionName is invalid. \
             Reason: Only the queue owner is allowed to invoke this action."
        )
    );
    for unknown in ["SendMessageBatch", "sendmessage", "Nothing"] {
        assert_eq!(
            refusal(granted_actions(&strings(&[unknown]))),
            invalid(&format!(
                "Value SQS:{unknown} for parameter ActionName is invalid. \
                 Reason: Please refer to the appropriate WSDL for a list of valid actions."
            ))
        );
    }
}

// ----- the codec, on bytes -----

fn decode(target: Option<&str>, body: &str) -> Result<Action, SqsError> {
    codec::decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target,
        body: body.as_bytes(),
    })
    .1
    .map(|request| request.action)
}

fn add_input(label: &str, accounts: &[&str], actions: &[&str]) -> Action {
    Action::AddPermission(AddPermissionInput {
        target: QueueTarget {
            queue_url: Some("u".into()),
        },
        label: label.into(),
        aws_account_ids: strings(accounts),
        actions: strings(actions),
    })
}

#[test]
fn json_add_permission_reads_label_and_both_lists() {
    let body = r#"{"QueueUrl":"u","Label":"l","AWSAccountIds":["111111111111","222222222222"],"Actions":["SendMessage","*"]}"#;
    assert_eq!(
        decode(Some("AmazonSQS.AddPermission"), body),
        Ok(add_input(
            "l",
            &["111111111111", "222222222222"],
            &["SendMessage", "*"]
        ))
    );
}

#[test]
fn query_add_permission_reads_indexed_account_ids_and_action_names() {
    let form = "Action=AddPermission&QueueUrl=u&Label=l&AWSAccountId.2=222222222222\
                &AWSAccountId.1=111111111111&ActionName.1=SendMessage&ActionName.2=*";
    assert_eq!(
        decode(None, form),
        Ok(add_input(
            "l",
            &["111111111111", "222222222222"],
            &["SendMessage", "*"]
        ))
    );
}

#[test]
fn remove_permission_reads_its_label_in_both_protocols() {
    let expected = Ok(Action::RemovePermission(RemovePermissionInput {
        target: QueueTarget {
            queue_url: Some("u".into()),
        },
        label: "l".into(),
    }));
    assert_eq!(
        decode(
            Some("AmazonSQS.RemovePermission"),
            r#"{"QueueUrl":"u","Label":"l"}"#
        ),
        expected
    );
    assert_eq!(
        decode(None, "Action=RemovePermission&QueueUrl=u&Label=l"),
        expected
    );
}

#[test]
fn a_missing_label_account_list_or_action_list_is_a_missing_parameter() {
    let missing = |name: &str| {
        (
            ErrorCode::MissingParameter,
            format!("The request must contain the parameter {name}."),
        )
    };
    let json = |body: &str| decode(Some("AmazonSQS.AddPermission"), body);
    assert_eq!(
        refusal(json(
            r#"{"QueueUrl":"u","AWSAccountIds":["1"],"Actions":["*"]}"#
        )),
        missing("Label")
    );
    assert_eq!(
        refusal(json(r#"{"QueueUrl":"u","Label":"l","Actions":["*"]}"#)),
        missing("PrincipalId")
    );
    for actions in ["", r#","Actions":[]"#] {
        let body = format!(r#"{{"QueueUrl":"u","Label":"l","AWSAccountIds":["1"]{actions}}}"#);
        assert_eq!(refusal(json(&body)), missing("Actions"), "{body}");
    }
    assert_eq!(
        refusal(decode(
            None,
            "Action=AddPermission&QueueUrl=u&Label=l&ActionName.1=*"
        )),
        missing("PrincipalId")
    );
    assert_eq!(
        refusal(decode(
            Some("AmazonSQS.RemovePermission"),
            r#"{"QueueUrl":"u"}"#
        )),
        missing("Label")
    );
}

#[test]
fn an_empty_account_list_is_given_not_missing_in_both_protocols() {
    // botocore's query serializer sends an empty list as its bare name.
    let expected = Ok(add_input("l", &[], &["*"]));
    assert_eq!(
        decode(
            None,
            "Action=AddPermission&QueueUrl=u&Label=l&AWSAccountId=&ActionName.1=*"
        ),
        expected
    );
    assert_eq!(
        decode(
            Some("AmazonSQS.AddPermission"),
            r#"{"QueueUrl":"u","Label":"l","AWSAccountIds":[],"Actions":["*"]}"#
        ),
        expected
    );
}

// ----- whole requests -----

fn app() -> Router {
    test_support::app(&test_support::engine().0)
}

/// A JSON request: the status and the parsed body.
async fn json_call(app: &Router, action: &str, body: Value) -> (StatusCode, Value) {
    let request = test_support::json_request(action, false)
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, _, bytes) = test_support::send(app, request).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// A Query request: the status and the XML text.
async fn query_call(app: &Router, form: &str) -> (StatusCode, String) {
    test_support::query_call(app, "/", form).await
}

async fn ok(app: &Router, action: &str, body: Value) -> Value {
    let (status, reply) = json_call(app, action, body).await;
    assert_eq!(status, StatusCode::OK, "{action}: {reply}");
    reply
}

async fn stored_policy(app: &Router) -> Option<String> {
    let reply = ok(
        app,
        "GetQueueAttributes",
        json!({ "QueueUrl": URL, "AttributeNames": ["Policy"] }),
    )
    .await;
    reply["Attributes"]["Policy"].as_str().map(str::to_string)
}

#[tokio::test]
async fn add_permission_shows_in_get_queue_attributes_and_remove_takes_it_away() {
    let app = app();
    ok(&app, "CreateQueue", json!({ "QueueName": "q" })).await;
    let reply = ok(
        &app,
        "AddPermission",
        json!({ "QueueUrl": URL, "Label": "l", "AWSAccountIds": ["111111111111"], "Actions": ["SendMessage"] }),
    )
    .await;
    assert_eq!(reply, json!({}));
    let expected = with_statement(
        None,
        "l",
        granted("l", "111111111111", &["SendMessage"]),
        ARN,
    )
    .unwrap();
    assert_eq!(stored_policy(&app).await, Some(expected));
    ok(
        &app,
        "RemovePermission",
        json!({ "QueueUrl": URL, "Label": "l" }),
    )
    .await;
    assert_eq!(stored_policy(&app).await, None);
}

#[tokio::test]
async fn query_add_permission_answers_an_empty_response_and_errors_as_xml() {
    let app = app();
    ok(&app, "CreateQueue", json!({ "QueueName": "q" })).await;
    let form = format!(
        "Action=AddPermission&QueueUrl={URL}&Label=l&AWSAccountId.1=111111111111&ActionName.1=ReceiveMessage"
    );
    let (status, body) = query_call(&app, &form).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("<AddPermissionResponse"), "{body}");
    assert!(!body.contains("<AddPermissionResult"), "{body}");
    let (status, body) = query_call(&app, &form).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.contains("<Code>InvalidParameterValue</Code>"),
        "{body}"
    );
    assert!(
        body.contains(
            "<Message>Value l for parameter Label is invalid. Reason: Already exists.</Message>"
        ),
        "{body}"
    );
    let (status, body) = query_call(
        &app,
        &format!("Action=RemovePermission&QueueUrl={URL}&Label=l"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("<RemovePermissionResponse"), "{body}");
}

#[tokio::test]
async fn too_many_actions_is_over_limit_with_status_403() {
    let app = app();
    ok(&app, "CreateQueue", json!({ "QueueName": "q" })).await;
    let (status, reply) = json_call(
        &app,
        "AddPermission",
        json!({ "QueueUrl": URL, "Label": "l", "AWSAccountIds": ["111111111111"],
                "Actions": vec!["SendMessage"; 8] }),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(reply["__type"], "com.amazonaws.sqs#OverLimit");
    assert_eq!(
        reply["message"],
        "8 Actions were found, maximum allowed is 7."
    );
    assert_eq!(stored_policy(&app).await, None);
}

#[tokio::test]
async fn a_missing_queue_is_reported_before_any_parameter_problem() {
    let app = app();
    for (action, body) in [
        (
            "AddPermission",
            json!({ "QueueUrl": URL, "Label": "bad label", "AWSAccountIds": [], "Actions": ["Nothing"] }),
        ),
        ("RemovePermission", json!({ "QueueUrl": URL, "Label": "l" })),
    ] {
        let (status, reply) = json_call(&app, action, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(reply["__type"], "com.amazonaws.sqs#QueueDoesNotExist");
        assert_eq!(reply["message"], "The specified queue does not exist.");
    }
}

#[tokio::test]
async fn a_policy_set_with_set_queue_attributes_takes_permissions_too() {
    let app = app();
    ok(&app, "CreateQueue", json!({ "QueueName": "q" })).await;
    let user = r#"{"Version":"2012-10-17","Statement":[{"Sid":"mine","Effect":"Allow","Principal":"*","Action":"sqs:SendMessage","Resource":"*"}]}"#;
    ok(
        &app,
        "SetQueueAttributes",
        json!({ "QueueUrl": URL, "Attributes": { "Policy": user } }),
    )
    .await;
    ok(
        &app,
        "AddPermission",
        json!({ "QueueUrl": URL, "Label": "l", "AWSAccountIds": ["111111111111"], "Actions": ["*"] }),
    )
    .await;
    let policy = stored_policy(&app).await.unwrap();
    assert!(policy.starts_with(&user[..user.len() - 2]), "{policy}");
    ok(
        &app,
        "RemovePermission",
        json!({ "QueueUrl": URL, "Label": "l" }),
    )
    .await;
    assert_eq!(stored_policy(&app).await.as_deref(), Some(user));
}
