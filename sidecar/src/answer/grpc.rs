//! An [`Answer`](super::Answer) as a gRPC status: its code and message, with `retry-after` and
//! `server-timing` metadata.

use super::Answer;
use crate::timing::StageTimes;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

/// The gRPC status of `answer`, with `server-timing` when `times` is given.
pub(crate) fn status(answer: &Answer, times: Option<&StageTimes>) -> Status {
    let mut status = Status::new(answer.code, answer.detail.clone());
    if let Some(t) = times {
        timing_metadata(status.metadata_mut(), t);
    }
    if let Some(secs) = answer.retry_after {
        status
            .metadata_mut()
            .insert("retry-after", MetadataValue::from(secs));
    }
    status
}

/// Adds `server-timing` to gRPC metadata.
pub(crate) fn timing_metadata(meta: &mut MetadataMap, times: &StageTimes) {
    if let Ok(v) = MetadataValue::try_from(times.header_value()) {
        meta.insert("server-timing", v);
    }
}

/// Upper-case name of a gRPC code, as the spec writes it (span attributes, `ConnectReply.error`).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
