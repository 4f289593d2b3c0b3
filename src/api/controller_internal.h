// Helpers the Controller's files share (controller.cc, controller_views.cc);
// not for use outside api/.
#ifndef GPUSCHED_API_CONTROLLER_INTERNAL_H_
#define GPUSCHED_API_CONTROLLER_INTERNAL_H_

#include <string>

#include "common/clock.h"

namespace gpusched::api {

// The steady clock and the wall clock, in microseconds (the controller is
// the live driver: it reads them).
Micros SteadyNow();
Micros WallNow();
// The last `lines` lines of the file at `path` ("" when unreadable).
std::string TailLines(const std::string& path, int lines);

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROLLER_INTERNAL_H_
