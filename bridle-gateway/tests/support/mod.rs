//! Fixtures shared by the gateway's integration tests.

pub mod kanboard_standin;
