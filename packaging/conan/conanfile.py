# A Conan 2 recipe that packages the checkout it lives in:
#   conan create packaging/conan --build=missing
# The configure options are those of docs/install.md's install step, without the tool: the
# library alone (ctest package_recipes checks them, and that the sources exported here
# configure on their own).
import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load

# What the library's build needs of the repository, relative to its root.
EXPORTED = ["CMakeLists.txt", "LICENSE", "README.md", "CHANGELOG.md", "cmake/*", "include/*",
            "src/*", "docs/*.md"]

# docs/install.md's install step, without the tool.
CONFIGURE_OPTIONS = {
    "COLOCK_BUILD_TESTS": "OFF",
    "COLOCK_BUILD_EXAMPLES": "OFF",
    "COLOCK_BUILD_BENCH": "OFF",
    "COLOCK_BUILD_TOOLS": "OFF",
}


class ColockConan(ConanFile):
    name = "colock"
    license = "BSL-1.0"
    description = "Distributed locks for Boost.Asio coroutines, backed by Redis"
    topics = ("redis", "distributed-lock", "asio", "coroutines")
    package_type = "library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"shared": [True, False], "fPIC": [True, False]}
    default_options = {"shared": False, "fPIC": True}

    def _root(self):
        return os.path.join(self.recipe_folder, "..", "..")

    def set_version(self):
        # The version is colock/version.hpp's, as the CMake package's.
        text = load(self, os.path.join(self._root(), "include", "colock", "version.hpp"))
        parts = {}
        for line in text.splitlines():
            for part in ("MAJOR", "MINOR", "PATCH"):
                prefix = "#define COLOCK_VERSION_" + part + " "
                if line.startswith(prefix):
                    parts[part] = line[len(prefix):].strip()
        self.version = "{}.{}.{}".format(parts["MAJOR"], parts["MINOR"], parts["PATCH"])

    def export_sources(self):
        for pattern in EXPORTED:
            copy(self, pattern, src=self._root(), dst=self.export_sources_folder)

    def configure(self):
        if self.options.shared:
            self.options.rm_safe("fPIC")

    def validate(self):
        check_min_cppstd(self, 20)

    def requirements(self):
        # In the public headers: Asio (Boost), fmt, OpenSSL (Asio's SSL streams).
        self.requires("boost/[>=1.81 <2]", transitive_headers=True)
        self.requires("fmt/[>=9.1 <10]", transitive_headers=True)
        self.requires("openssl/[>=3 <4]", transitive_headers=True)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        CMakeDeps(self).generate()
        toolchain = CMakeToolchain(self)
        for name, value in CONFIGURE_OPTIONS.items():
            toolchain.cache_variables[name] = value
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "colock")
        self.cpp_info.set_property("cmake_target_name", "colock::colock")
        self.cpp_info.set_property("pkg_config_name", "colock")
        self.cpp_info.libs = ["colock"]
        self.cpp_info.requires = ["boost::headers", "fmt::fmt", "openssl::ssl", "openssl::crypto"]
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
