//! Log-in throttling: the panel counts its failed log-ins with the admin API's throttle
//! ([`crate::admin::throttle`]), per client address and per credential tried, within the
//! panel's [`super::LoginLimits`]; past them the log-in page answers 429 `too_many_logins`
//! without checking the credential.

pub(crate) use crate::admin::throttle::LoginThrottle;
