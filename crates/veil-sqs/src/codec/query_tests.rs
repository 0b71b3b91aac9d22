//! Query decoding's corner rules, which the form-to-object rebuild must keep whatever it is built from: which
//! of several spellings of one parameter wins, what a list does to a plain field of its name, and how indexes,
//! escapes and unknown fields are read.

use std::collections::BTreeMap;

use super::*;
use crate::api::*;
use crate::error::ErrorCode;

fn query_action(form: &str) -> Result<Action, SqsError> {
    let (_, decoded) = decode(&HttpRequestParts {
        method: "POST",
        query: None,
        target: None,
        body: form.as_bytes(),
    });
    decoded.map(|request| request.action)
}

fn received(form: &str) -> ReceiveMessageInput {
    match query_action(form) {
        Ok(Action::ReceiveMessage(input)) => input,
        other => panic!("not a ReceiveMessage: {other:?}"),
    }
}

fn created(form: &str) -> CreateQueueInput {
    match query_action(form) {
        Ok(Action::CreateQueue(input)) => input,
        other => panic!("not a CreateQueue: {other:?}"),
    }
}

#[test]
fn a_repeated_plain_field_keeps_its_last_value() {
    let input = received("Action=ReceiveMessage&QueueUrl=first&QueueUrl=second");
    assert_eq!(input.target.queue_url.as_deref(), Some("second"));
}

#[test]
fn a_flattened_list_replaces_a_plain_field_of_its_name() {
    let input =
        received("Action=ReceiveMessage&QueueUrl=u&AttributeNames=ignored&AttributeName.1=All");
    assert_eq!(input.system_attribute_names, ["All"]);
}

#[test]
fn a_plain_field_where_a_list_belongs_is_a_type_error() {
    let error = query_action("Action=ReceiveMessage&QueueUrl=u&AttributeNames=All").unwrap_err();
    assert_eq!(error.code, ErrorCode::Serialization);
    assert_eq!(
        error.message,
        "Parameter AttributeNames must be a list of strings."
    );
}

#[test]
fn a_map_entry_repeated_under_another_index_keeps_the_later_value() {
    let input = created(
        "Action=CreateQueue&QueueName=q&Attribute.1.Name=DelaySeconds&Attribute.1.Value=1\
         &Attribute.2.Name=DelaySeconds&Attribute.2.Value=2",
    );
    assert_eq!(
        input.attributes,
        BTreeMap::from([("DelaySeconds".into(), "2".into())])
    );
}

#[test]
fn a_map_entry_named_twice_takes_its_first_name() {
    let input = created(
        "Action=CreateQueue&QueueName=q&Attribute.1.Name=First&Attribute.1.Name=Second\
         &Attribute.1.Value=v",
    );
    assert_eq!(
        input.attributes,
        BTreeMap::from([("First".into(), "v".into())])
    );
}

#[test]
fn list_items_come_in_index_order_whatever_the_field_order() {
    let input = received("Action=ReceiveMessage&QueueUrl=u&AttributeName.10=B&AttributeName.2=A");
    assert_eq!(input.system_attribute_names, ["A", "B"]);
}

#[test]
fn escaped_names_and_values_are_decoded() {
    let input = received("Action=ReceiveMessage&Queue%55rl=a%20b+c%2Bd");
    assert_eq!(input.target.queue_url.as_deref(), Some("a b c+d"));
}

#[test]
fn an_index_that_is_not_a_positive_number_is_named_in_full() {
    for form in [
        "Action=ReceiveMessage&AttributeName.0=All",
        "Action=ReceiveMessage&AttributeName.x=All",
    ] {
        let error = query_action(form).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParameterValue, "{form}");
        assert!(
            error.message.starts_with("The parameter AttributeName."),
            "{form}: {}",
            error.message
        );
    }
}

#[test]
fn a_bad_index_inside_a_batch_entry_is_named_from_the_entry() {
    let error = query_action(
        "Action=SendMessageBatch&QueueUrl=u&SendMessageBatchRequestEntry.1.Id=a\
         &SendMessageBatchRequestEntry.1.MessageAttribute.x.Name=n",
    )
    .unwrap_err();
    assert_eq!(
        error.message,
        "The parameter MessageAttribute.x.Name does not have a valid index."
    );
}

#[test]
fn unknown_dotted_fields_are_ignored() {
    let input = received("Action=ReceiveMessage&QueueUrl=u&Unknown.1.Thing=x&QueueUrl.2=y");
    assert_eq!(input.target.queue_url.as_deref(), Some("u"));
}

#[test]
fn a_message_attribute_value_reads_its_value_fields_only() {
    let Ok(Action::SendMessage(input)) = query_action(
        "Action=SendMessage&QueueUrl=u&MessageBody=b&MessageAttribute.1.Name=a\
         &MessageAttribute.1.Value.DataType=String&MessageAttribute.1.Value.StringValue=s\
         &MessageAttribute.1.DataType=ignored",
    ) else {
        panic!("not a SendMessage")
    };
    let attribute = &input.message.message_attributes["a"];
    assert_eq!(attribute.data_type.as_deref(), Some("String"));
    assert_eq!(attribute.string_value.as_deref(), Some("s"));
}
