//! Client connections under limits: caps on how many are held ([`limits`], pure), the timers that
//! ask them to end ([`timers`], pure), the request path's count of what is in flight
//! ([`tracked`]), the open-file limit the total cap is derived from ([`fd_limit`]), and one
//! listener's metric handles ([`meters`]). The accept loop (`net::accept`) applies them.

pub(crate) mod fd_limit;
pub(crate) mod limits;
pub(crate) mod meters;
pub(crate) mod timers;
pub(crate) mod tracked;
