// Checked HDF5 wrappers (see hdf5_util.h).
#include "core/hdf5_util.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace zt {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

}  // namespace zt

namespace zt::h5 {

void silence_error_printing() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
}

Handle owned(hid_t id, Handle::Closer closer, const std::string& path, const std::string& what) {
  ZT_CHECK(id >= 0, path, ": HDF5 failed to ", what);
  return Handle(id, closer);
}

void check_status(herr_t status, const std::string& path, const std::string& what) {
  if (status >= 0) return;
  // HDF5's own error stack is silenced; the system's reason for a failed write (a full disk, a
  // quota) is what the user can act on, so it is named when the file system reports one.
  const int error = errno;
  if (error == ENOSPC || error == EDQUOT) {
    std::string free_space;
    struct statvfs fs {};
    const std::string dir = std::filesystem::path(path).parent_path().string();
    if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0)
      free_space = cat(" (", static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize, " bytes free there)");
    fail(path, ": HDF5 failed to ", what, ": ", std::strerror(error), free_space);
  }
  fail(path, ": HDF5 failed to ", what);
}

std::string describe_type(hid_t type) {
  const H5T_class_t type_class = H5Tget_class(type);
  const size_t bits = H5Tget_size(type) * 8;
  if (type_class == H5T_INTEGER) return cat(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits);
  if (type_class == H5T_FLOAT) return cat("float", bits);
  if (type_class == H5T_STRING) return "string";
  return "a non-numeric type";
}

namespace {
// A variable-length UTF-8 string type (what h5py writes for a Python str).
Handle utf8_string_type(const std::string& path) {
  Handle type = owned_type(H5Tcopy(H5T_C_S1), path, "copy the string type");
  check_status(H5Tset_size(type.get(), H5T_VARIABLE), path, "make a variable-length string type");
  check_status(H5Tset_cset(type.get(), H5T_CSET_UTF8), path, "set the UTF-8 character set");
  return type;
}

// Opens an attribute that must exist and hold exactly one value.
Handle open_scalar_attribute(hid_t object, const std::string& path, const char* name) {
  ZT_CHECK(has_attribute(object, path, name), path, ": attribute '", name, "' is missing");
  Handle attribute = owned_attribute(H5Aopen(object, name, H5P_DEFAULT), path, cat("open attribute '", name, "'"));
  Handle space = owned_space(H5Aget_space(attribute.get()), path, cat("get the dataspace of attribute '", name, "'"));
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  ZT_CHECK(points == 1, path, ": attribute '", name, "' holds ", points, " values, expected one");
  return attribute;
}
}  // namespace

void write_int64_attribute(hid_t object, const std::string& path, const char* name, int64_t value) {
  Handle space = owned_space(H5Screate(H5S_SCALAR), path, "create a scalar dataspace");
  Handle attribute = owned_attribute(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                     path, cat("create attribute '", name, "'"));
  check_status(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value), path, cat("write attribute '", name, "'"));
}

void write_string_attribute(hid_t object, const std::string& path, const char* name, const std::string& value) {
  Handle type = utf8_string_type(path);
  Handle space = owned_space(H5Screate(H5S_SCALAR), path, "create a scalar dataspace");
  Handle attribute = owned_attribute(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                     path, cat("create attribute '", name, "'"));
  const char* text = value.c_str();
  check_status(H5Awrite(attribute.get(), type.get(), &text), path, cat("write attribute '", name, "'"));
}

bool has_attribute(hid_t object, const std::string& path, const char* name) {
  const htri_t exists = H5Aexists(object, name);
  check_status(exists, path, cat("look up attribute '", name, "'"));
  return exists > 0;
}

int64_t read_int64_attribute(hid_t object, const std::string& path, const char* name) {
  Handle attribute = open_scalar_attribute(object, path, name);
  Handle type = owned_type(H5Aget_type(attribute.get()), path, cat("get the type of attribute '", name, "'"));
  ZT_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, path, ": attribute '", name, "' is ", describe_type(type.get()),
           ", expected an integer");
  int64_t value = 0;
  check_status(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), path, cat("read attribute '", name, "'"));
  return value;
}

std::string read_string_attribute(hid_t object, const std::string& path, const char* name) {
  Handle attribute = open_scalar_attribute(object, path, name);
  Handle file_type = owned_type(H5Aget_type(attribute.get()), path, cat("get the type of attribute '", name, "'"));
  ZT_CHECK(H5Tget_class(file_type.get()) == H5T_STRING, path, ": attribute '", name, "' is ",
           describe_type(file_type.get()), ", expected a string");
  const htri_t variable = H5Tis_variable_str(file_type.get());
  check_status(variable, path, cat("inspect the string type of attribute '", name, "'"));
  Handle memory_type = owned_type(H5Tcopy(H5T_C_S1), path, "copy the string type");
  check_status(H5Tset_cset(memory_type.get(), H5Tget_cset(file_type.get())), path, "set a string character set");
  if (variable > 0) {
    check_status(H5Tset_size(memory_type.get(), H5T_VARIABLE), path, "make a variable-length string type");
    char* text = nullptr;
    check_status(H5Aread(attribute.get(), memory_type.get(), &text), path, cat("read attribute '", name, "'"));
    std::string value = text ? std::string(text) : std::string();
    H5free_memory(text);
    return value;
  }
  const size_t size = H5Tget_size(file_type.get());
  ZT_CHECK(size > 0, path, ": attribute '", name, "' has an invalid string size");
  check_status(H5Tset_size(memory_type.get(), size + 1), path, "size a fixed-length string type");
  check_status(H5Tset_strpad(memory_type.get(), H5T_STR_NULLTERM), path, "set a string padding");
  std::string buffer(size + 1, '\0');
  check_status(H5Aread(attribute.get(), memory_type.get(), buffer.data()), path, cat("read attribute '", name, "'"));
  return std::string(buffer.c_str());
}

void write_f32_dataset(hid_t file, const std::string& path, const char* name, const float* data, hsize_t n) {
  Handle space = owned_space(H5Screate_simple(1, &n, nullptr), path, "create a dataspace");
  Handle dataset = owned_dataset(H5Dcreate2(file, name, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                            H5P_DEFAULT),
                                 path, cat("create dataset '", name, "'"));
  if (n) check_status(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path,
                      cat("write dataset '", name, "'"));
}

Handle open_f32_dataset(hid_t file, const std::string& path, const char* name, hsize_t& length) {
  const htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
  check_status(exists, path, cat("look up dataset '", name, "'"));
  ZT_CHECK(exists > 0, path, ": dataset '", name, "' is missing");
  Handle dataset = owned_dataset(H5Dopen2(file, name, H5P_DEFAULT), path, cat("open '", name, "' as a dataset"));
  Handle type = owned_type(H5Dget_type(dataset.get()), path, cat("get the type of dataset '", name, "'"));
  ZT_CHECK(H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 4, path, ": dataset '", name,
           "' has type ", describe_type(type.get()), ", expected float32");
  Handle space = owned_space(H5Dget_space(dataset.get()), path, cat("get the dataspace of '", name, "'"));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  ZT_CHECK(rank == 1, path, ": dataset '", name, "' has rank ", rank, ", expected 1");
  check_status(H5Sget_simple_extent_dims(space.get(), &length, nullptr), path, cat("get the size of '", name, "'"));
  return dataset;
}

void read_1d_range(hid_t dataset, const std::string& path, const char* name, hid_t memory_type, hsize_t begin,
                   hsize_t count, void* out) {
  Handle file_space = owned_space(H5Dget_space(dataset), path, cat("get the dataspace of '", name, "'"));
  check_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &begin, nullptr, &count, nullptr), path,
               cat("select elements [", begin, ", ", begin + count, ") of '", name, "'"));
  Handle memory_space = owned_space(H5Screate_simple(1, &count, nullptr), path, "create a memory dataspace");
  check_status(H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out), path,
               cat("read elements [", begin, ", ", begin + count, ") of '", name, "'"));
}

}  // namespace zt::h5
