package server

func (s *Server) adminRoutes() {}
