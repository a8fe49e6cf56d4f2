//! kberg-agent: not built yet. See ARCHITECTURE.md for what lives here.
