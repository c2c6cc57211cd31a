//! The graceful stop of an idem server, written once: stop accepting and drain
//! in-flight requests within the grace period, stop the background duties (each
//! returns, none is aborted), flush what is buffered, then release the leases. Leases
//! go last so nothing this server still does can race a successor.

use std::future::Future;

use crate::grpc_server::{GrpcServerError, RunningServer};
use crate::shutdown::Duties;

/// Runs `server` until its stop token is cancelled, then stops in order.
pub async fn serve_then_stop(
    server: RunningServer,
    duties: &Duties,
    flush: impl Future<Output = ()>,
    release_leases: impl Future<Output = ()>,
) -> Result<(), GrpcServerError> {
    let served = server.stopped().await;
    duties.stop().await;
    flush.await;
    release_leases.await;
    served
}
