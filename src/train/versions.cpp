// Library versions for run.json, asked of each library at run time (not the headers').
#include "train/versions.h"

#include <cblas.h>
#include <hdf5.h>
#include <mpi.h>

#include <string>

#include "core/error.h"

namespace zt {

nlohmann::json software_versions() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (size_t line_end = mpi.find_first_of(",\n"); line_end != std::string::npos) mpi.resize(line_end);
  return {{"zerotune", ZT_VERSION},
          {"hdf5", cat(major, ".", minor, ".", release)},
          {"mpi", mpi},
          {"openblas", openblas_get_config()},
          {"compiler", __VERSION__}};
}

}  // namespace zt
