//! The SQS actions Veil knows but refuses, in one place: the message move tasks. The codec decodes them to
//! `Action::Unsupported` so that a client gets SQS's UnsupportedOperation with the action's name rather than an
//! unknown-action error; each will get its own handler file when its issue lands.

use crate::api::{ActionName, Output};
use crate::error::{SqsError, SqsResult};

pub(super) fn unsupported(name: ActionName) -> SqsResult<Output> {
    Err(SqsError::unsupported(name.as_str()))
}
