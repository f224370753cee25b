#!/usr/bin/env python3
"""ctest package_recipes: the vcpkg port (packaging/vcpkg/colock) and the Conan recipe
(packaging/conan/conanfile.py), checked as far as a machine without vcpkg or Conan allows, and
the options of the Debian package's rules (debian/rules).

- vcpkg.json parses, names colock at colock/version.hpp's version, and depends on every Boost
  library the sources include, on fmt and on OpenSSL; the port builds the checkout it lives in.
- conanfile.py compiles; its Boost, fmt and OpenSSL requirements are there.
- Both, and debian/rules, configure colock with the options of docs/install.md's install step,
  each an option() of CMakeLists.txt, and leave the tool out (COLOCK_BUILD_TOOLS=OFF): they
  package the library.
- The sources the Conan recipe exports configure on their own, with those options.

Usage: check_recipes.py SOURCE_DIR CMAKE WORK_DIR. Prints each problem; exits 1 when there is one.
"""
import ast
import fnmatch
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys

root, cmake, work = sys.argv[1:4]
problems = []


def read(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


version_text = read("include/colock/version.hpp")
version = ".".join(
    re.search(r"#define COLOCK_VERSION_%s (\d+)" % part, version_text).group(1)
    for part in ("MAJOR", "MINOR", "PATCH"))

# The options of docs/install.md's install step (the first sh block under "## Installing").
install = read("docs/install.md")
section = install[install.index("## Installing"):]
step = section[section.index("```sh"):section.index("```", section.index("```sh") + 5)]
install_options = dict(re.findall(r"-D(COLOCK_[A-Z_]+)=(\S+)", step))
if not install_options:
    problems.append("docs/install.md: no -DCOLOCK_...=... options in the install step")
# The recipes package the library alone: the install step's options, without the tool.
recipe_options = dict(install_options, COLOCK_BUILD_TOOLS="OFF")
cmake_lists = read("CMakeLists.txt")
for name in recipe_options:
    if not re.search(r"option\(%s\b" % name, cmake_lists):
        problems.append("%s is no option() of CMakeLists.txt" % name)

# vcpkg
port = "packaging/vcpkg/colock"
try:
    manifest = json.loads(read(port + "/vcpkg.json"))
except ValueError as e:
    manifest = {}
    problems.append("%s/vcpkg.json does not parse: %s" % (port, e))
if manifest.get("name") != "colock":
    problems.append("%s/vcpkg.json names %r, not colock" % (port, manifest.get("name")))
if manifest.get("version") != version:
    problems.append("%s/vcpkg.json has version %r; colock/version.hpp says %s" %
                    (port, manifest.get("version"), version))
depends = {d if isinstance(d, str) else d.get("name") for d in manifest.get("dependencies", [])}
included = set()
for top in ("include", "src"):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for name in files:
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                included.update(re.findall(r"#include <boost/([a-z_0-9]+)", f.read()))
needed = {"boost-" + lib for lib in included} | {"boost-headers", "fmt", "openssl"}
for dep in sorted(needed - depends):
    problems.append("%s/vcpkg.json does not depend on %s, which the sources need" % (port, dep))
portfile = read(port + "/portfile.cmake")
source = re.search(r'set\(SOURCE_PATH "\$\{CMAKE_CURRENT_LIST_DIR\}/([^"]*)"\)', portfile)
if not source or os.path.realpath(os.path.join(root, port, source.group(1))) != \
        os.path.realpath(root):
    problems.append("%s/portfile.cmake: SOURCE_PATH is not the checkout's root" % port)
port_options = dict(re.findall(r"-D(COLOCK_[A-Z_]+)=(\S+)", portfile))
if port_options != recipe_options:
    problems.append("%s/portfile.cmake configures with %s, not %s" %
                    (port, port_options, recipe_options))

# The Debian package's rules build the same (scripts/debian-package.sh builds it).
rules_options = dict(re.findall(r"-D(COLOCK_BUILD_[A-Z_]+)=(\S+)", read("debian/rules")))
if rules_options != recipe_options:
    problems.append("debian/rules configures with %s, not %s" % (rules_options, recipe_options))

# Conan
recipe = "packaging/conan/conanfile.py"
os.makedirs(work, exist_ok=True)
try:
    py_compile.compile(os.path.join(root, recipe), cfile=os.path.join(work, "conanfile.pyc"),
                       doraise=True)
except py_compile.PyCompileError as e:
    problems.append("%s does not compile: %s" % (recipe, e.msg))
recipe_text = read(recipe)
constants = {}
for node in ast.parse(recipe_text).body:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id in ("EXPORTED", "CONFIGURE_OPTIONS"):
                constants[target.id] = ast.literal_eval(node.value)
if constants.get("CONFIGURE_OPTIONS") != recipe_options:
    problems.append("%s configures with %s, not %s" %
                    (recipe, constants.get("CONFIGURE_OPTIONS"), recipe_options))
for requirement in ("boost/", "fmt/", "openssl/"):
    if 'self.requires("%s' % requirement not in recipe_text:
        problems.append("%s does not require %s" % (recipe, requirement.rstrip("/")))

# The sources the recipe exports (its patterns, as Conan's copy() matches them: `*` spans
# directories), configured on their own.
exported = os.path.join(work, "exported")
shutil.rmtree(exported, ignore_errors=True)
count = 0
for dirpath, dirnames, files in os.walk(root):
    dirnames[:] = [d for d in dirnames if d not in (".git", "build")]
    for name in files:
        rel = os.path.relpath(os.path.join(dirpath, name), root)
        if any(fnmatch.fnmatch(rel, p) for p in constants.get("EXPORTED", [])):
            os.makedirs(os.path.join(exported, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), os.path.join(exported, rel))
            count += 1
configure = [cmake, "-S", exported, "-B", os.path.join(work, "exported-build")]
configure += ["-D%s=%s" % kv for kv in sorted(recipe_options.items())]
result = subprocess.run(configure, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
if result.returncode != 0:
    problems.append("the %d files %s exports do not configure on their own:\n%s" %
                    (count, recipe, result.stdout[-3000:]))

for p in problems:
    print("package_recipes: " + p)
if problems:
    sys.exit(1)
print("package_recipes: vcpkg port and Conan recipe of colock %s: ok (%d files exported, "
      "configured with %s)" % (version, count, " ".join("-D%s=%s" % kv for kv in
                                                          sorted(recipe_options.items()))))
