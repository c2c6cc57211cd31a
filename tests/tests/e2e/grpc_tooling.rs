//! Generic gRPC tools work against a broker: it serves the standard health service and
//! server reflection (v1) describing idem's own services.

use idem_tests::BrokerProcess;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

async fn channel(broker: &BrokerProcess) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", broker.bootstrap()))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect")
}

#[tokio::test]
async fn given_a_running_broker_then_the_health_service_reports_the_broker_serving() {
    let broker = BrokerProcess::start();
    let mut health = HealthClient::new(channel(&broker).await);
    let answer = health
        .check(HealthCheckRequest {
            service: "idem.v1.Broker".into(),
        })
        .await
        .expect("health check")
        .into_inner();
    assert_eq!(answer.status(), ServingStatus::Serving);
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await;
    assert_eq!(
        unknown.expect_err("unknown service").code(),
        tonic::Code::NotFound
    );
}

#[tokio::test]
async fn given_a_running_broker_then_reflection_lists_the_broker_service() {
    let broker = BrokerProcess::start();
    let mut reflection = ServerReflectionClient::new(channel(&broker).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter(vec![request]))
        .await
        .expect("reflection stream")
        .into_inner();
    let answer = answers
        .message()
        .await
        .expect("reflection answer")
        .expect("one answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer: {answer:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"idem.v1.Broker".to_string()),
        "services: {names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "services: {names:?}"
    );
}
