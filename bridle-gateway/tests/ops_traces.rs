//! placeholder while the test is written
