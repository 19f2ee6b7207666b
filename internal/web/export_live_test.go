package web

// LiveQueued is the bytes of /live messages handed to the sockets'
// writers and not yet written (now), and the most there have been at
// once since the server started (peak).
func (s *Server) LiveQueued() (now, peak int64) {
	return s.slots.queued.Load(), s.slots.queuedPeak.Load()
}

// LiveCoalesced counts the live flushes put off because a socket's
// writer was still writing the message before.
func (s *Server) LiveCoalesced() int64 { return s.slots.coalesced.Load() }

// LiveSockets counts the open /live sockets.
func (s *Server) LiveSockets() int {
	s.slots.mu.Lock()
	defer s.slots.mu.Unlock()
	return s.slots.total
}

// TilesPerPage is how many tiles a page of the overview shows.
const TilesPerPage = tilesPerPage
