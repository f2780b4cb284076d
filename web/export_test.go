package web

import "time"

// SetThrottleRefill makes s give a throttled client one wrong try back per
// d (loginRefill in production), so a test on a slow machine never sees
// a try come back while it counts them.
func SetThrottleRefill(s *Server, d time.Duration) { s.throttle.refill = d }
