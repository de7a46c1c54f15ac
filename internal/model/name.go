package model

// ServiceName is a Service's namespace and name.
type ServiceName struct {
	Namespace, Name string
}

func (n ServiceName) String() string { return n.Namespace + "/" + n.Name }

// Compare orders names by namespace then name.
func (n ServiceName) Compare(o ServiceName) int {
	if n.Namespace != o.Namespace {
		if n.Namespace < o.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case n.Name < o.Name:
		return -1
	case n.Name > o.Name:
		return 1
	}
	return 0
}
