// Package plan computes, purely, the ordered operations (model.Op) that
// turn an observed IPVS table into a desired one, touching only what we own.
package plan
