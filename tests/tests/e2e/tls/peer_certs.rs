//! Every TLS listener hands the client's certificate chain to the services: a request
//! that came through the runtime's TLS accept path answers `Request::peer_certs()` with
//! the certificate the client presented (what authentication reads its principal from).

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::future::{ready, BoxFuture, Ready};
use idem_runtime::grpc_server::{GrpcListener, GrpcSettings};
use idem_runtime::health::Health;
use idem_runtime::shutdown::CancellationToken;
use idem_runtime::tls::{ClientAuth, ServerTls, TlsFiles as ServerTlsFiles};
use idem_tests::tls::{CertAuthority, TlsFiles};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::server::NamedService;
use tonic_prost::ProstCodec;

/// One RPC, `/idem.test.PeerCerts/First`: the DER of the first certificate the client
/// presented (empty when none).
#[derive(Clone)]
struct PeerCerts;

impl tonic::server::NamedService for PeerCerts {
    const NAME: &'static str = "idem.test.PeerCerts";
}

impl tower::Service<http::Request<tonic::body::Body>> for PeerCerts {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Vec<u8>, ()>::default());
            Ok(grpc.unary(FirstPeerCert, request).await)
        })
    }
}

struct FirstPeerCert;

impl tonic::server::UnaryService<()> for FirstPeerCert {
    type Response = Vec<u8>;
    type Future = Ready<Result<tonic::Response<Vec<u8>>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<()>) -> Self::Future {
        let first = request
            .peer_certs()
            .and_then(|chain| chain.first().map(|cert| cert.to_vec()))
            .unwrap_or_default();
        ready(Ok(tonic::Response::new(first)))
    }
}

#[tokio::test]
async fn given_a_client_certificate_when_a_tls_listener_serves_a_request_then_peer_certs_returns_it(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("peer certs CA");
    let files = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let server_files = ServerTlsFiles {
        cert: Some(files.cert.clone()),
        key: Some(files.key.clone()),
        ca: Some(files.ca.clone()),
        client_auth: ClientAuth::Required,
    };
    let loaded = server_files.load().expect("load").expect("TLS on");
    let stop = CancellationToken::new();
    let listener = GrpcListener::bind("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("bind")
        .with_tls(Some(ServerTls::new(server_files, loaded.server)));
    let address = listener.local_addr();
    let _server = listener
        .serve(
            tonic::service::Routes::new(PeerCerts),
            PeerCerts::NAME,
            &Health::new(),
            GrpcSettings::default(),
            stop.clone(),
        )
        .expect("serve");

    let client = ca.client("alice");
    let tls = idem_client::TlsConfig::new(ca.cert_pem())
        .with_client_identity(client.cert_pem.clone(), client.key_pem.clone());
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{address}"))
        .expect("endpoint")
        .tls_config(tls.client_config())
        .expect("client TLS")
        .connect()
        .await
        .expect("connect over mTLS");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let answer: tonic::Response<Vec<u8>> = grpc
        .unary(
            tonic::Request::new(()),
            PathAndQuery::from_static("/idem.test.PeerCerts/First"),
            ProstCodec::<(), Vec<u8>>::default(),
        )
        .await
        .expect("answered");
    assert_eq!(
        answer.into_inner(),
        client.cert_der,
        "the client's own certificate"
    );
    stop.cancel();
}
