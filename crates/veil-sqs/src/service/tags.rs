//! The tag actions: TagQueue, UntagQueue and ListQueueTags. Tags are kept in the queue's config, so they are
//! durable with it; CreateQueue shares this file's checks for the tags it is given.

use std::collections::BTreeMap;

use veil_core::EngineError;

use super::{engine_error, RequestContext, Service};
use crate::api::{Output, QueueTarget, TagQueueInput, UntagQueueInput};
use crate::error::{SqsError, SqsResult};
use crate::limits;

impl Service {
    pub(super) async fn tag_queue(
        &self,
        context: &RequestContext,
        input: TagQueueInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        validate_tags(&input.tags)?;
        let tags = input.tags;
        // The count is checked inside the engine's update, on the merged tags, so that two concurrent
        // TagQueue calls cannot together pass the limit.
        self.engine
            .update_queue_config(&key, move |config| {
                config.tags.extend(tags);
                if config.tags.len() > limits::TAGS_PER_QUEUE_MAX {
                    return Err(EngineError::InvalidArgument(too_many_tags_message()));
                }
                Ok(())
            })
            .await
            .map_err(engine_error)?;
        Ok(Output::Empty)
    }

    pub(super) async fn untag_queue(
        &self,
        context: &RequestContext,
        input: UntagQueueInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let tag_keys = input.tag_keys;
        self.engine
            .update_queue_config(&key, move |config| {
                for tag_key in &tag_keys {
                    config.tags.remove(tag_key);
                }
                Ok(())
            })
            .await
            .map_err(engine_error)?;
        Ok(Output::Empty)
    }

    pub(super) fn list_queue_tags(
        &self,
        context: &RequestContext,
        target: &QueueTarget,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, target)?;
        let info = self.engine.queue_info(&key).map_err(engine_error)?;
        Ok(Output::Tags(info.config.tags))
    }
}

pub(super) fn too_many_tags_message() -> String {
    format!(
        "Too many tags: a queue can have at most {}.",
        limits::TAGS_PER_QUEUE_MAX
    )
}

/// Checks every tag's key and value length, in key order.
pub(super) fn validate_tags(tags: &BTreeMap<String, String>) -> SqsResult<()> {
    for (key, value) in tags {
        validate_tag(key, value)?;
    }
    Ok(())
}

fn validate_tag(key: &str, value: &str) -> SqsResult<()> {
    if key.is_empty() || key.chars().count() > limits::TAG_KEY_CHARS_MAX {
        return Err(SqsError::invalid_value(
            "Tag.Key",
            key,
            &format!(
                "Tag keys must be 1 to {} characters long.",
                limits::TAG_KEY_CHARS_MAX
            ),
        ));
    }
    if value.chars().count() > limits::TAG_VALUE_CHARS_MAX {
        return Err(SqsError::invalid_value(
            "Tag.Value",
            value,
            &format!(
                "Tag values must be at most {} characters long.",
                limits::TAG_VALUE_CHARS_MAX
            ),
        ));
    }
    Ok(())
}
