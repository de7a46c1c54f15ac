package source

// parseFile decodes every document of a manifest file, each object on its
// own, as kubectl apply -f does: it returns the objects that are good and
// a problem for each one that is not. The tests' view of readDocuments.
func parseFile(path string, data []byte, r rules) ([]object, []Problem) {
	reads, whole := readDocuments(path, data, r)
	if whole != nil {
		return nil, []Problem{*whole}
	}
	var objs []object
	var problems []Problem
	for _, rd := range reads {
		if rd.problem != nil {
			problems = append(problems, *rd.problem)
			continue
		}
		objs = append(objs, rd.object)
	}
	return objs, problems
}
