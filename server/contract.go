package server

func (s *Server) contractRoutes() {}
