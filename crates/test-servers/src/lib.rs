//! Scripted judge servers on 127.0.0.1 for refscore's tests, one per wire
//! protocol: OpenAI's chat completions ([`openai`]) and Batch API
//! ([`openai_batch`]), Anthropic's Messages and Message Batches
//! ([`anthropic`]). Each decides its replies from a handler the test
//! gives, logs what it received, and can fail, stall or hang where a test
//! says, so failure paths are tested against real sockets.

pub mod anthropic;
mod faults;
mod http;
pub mod openai;
pub mod openai_batch;

pub use faults::Faults;
pub use http::{read_request, refused_url};
