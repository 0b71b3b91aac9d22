//! The tag actions: TagQueue, UntagQueue and ListQueueTags. Tags are kept in the queue's protocol settings
//! (under `veil_core::SQS_TAG_SETTING_PREFIX`), so they are durable with it; CreateQueue shares this file's
//! checks for the tags it is given.

use std::collections::BTreeMap;

use veil_core::{EngineError, QueueConfig, SQS_TAG_SETTING_PREFIX};

use super::{engine_error, RequestContext, Service};
use crate::api::{Output, QueueTarget, TagQueueInput, UntagQueueInput};
use crate::error::{SqsError, SqsResult};
use crate::limits;
use crate::validate;

impl Service {
    pub(super) async fn tag_queue(
        &self,
        context: &RequestContext,
        input: TagQueueInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        // No tag at all is a missing parameter, in both protocols (an empty JSON map is what a Query request
        // without any `Tag.N` sends).
        if input.tags.is_empty() {
            return Err(SqsError::missing("Tags"));
        }
        validate::tags::given(&input.tags)?;
        let tags = input.tags;
        let too_many = validate::tags::too_many(&key.name).message;
        // The count is checked inside the engine's update, on the merged tags, so that two concurrent
        // TagQueue calls cannot together pass the limit; a refused update changes nothing. The engine's
        // InvalidArgument maps back to InvalidParameterValue with this text (`engine_error`).
        self.engine
            .update_queue_config(&key, move |config| {
                let mut merged = tags_of(config);
                merged.extend(tags.clone());
                if merged.len() > limits::TAGS_PER_QUEUE_MAX {
                    return Err(EngineError::InvalidArgument(too_many.clone()));
                }
                set_tags(config, merged);
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
        validate::tags::keys(&input.tag_keys)?;
        let tag_keys = input.tag_keys;
        self.engine
            .update_queue_config(&key, move |config| {
                let mut tags = tags_of(config);
                for tag_key in &tag_keys {
                    tags.remove(tag_key);
                }
                set_tags(config, tags);
                Ok(())
            })
            .await
            .map_err(engine_error)?;
        Ok(Output::Empty)
    }

    pub(super) async fn list_queue_tags(
        &self,
        context: &RequestContext,
        target: &QueueTarget,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, target)?;
        let info = self.engine.queue_info(&key).await.map_err(engine_error)?;
        Ok(Output::Tags(tags_of(&info.config)))
    }
}

/// A queue's tags.
pub(super) fn tags_of(config: &QueueConfig) -> BTreeMap<String, String> {
    config.settings_under(SQS_TAG_SETTING_PREFIX)
}

/// Replaces a queue's tags.
pub(super) fn set_tags(config: &mut QueueConfig, tags: BTreeMap<String, String>) {
    config.set_settings_under(SQS_TAG_SETTING_PREFIX, tags);
}

/// CreateQueue's tags: each valid and at most 50 (`validate::tags`).
pub(super) fn validate_new_queue_tags(
    queue_name: &str,
    tags: &BTreeMap<String, String>,
) -> SqsResult<()> {
    validate::tags::given(tags)?;
    if tags.len() > limits::TAGS_PER_QUEUE_MAX {
        return Err(validate::tags::too_many(queue_name));
    }
    Ok(())
}
