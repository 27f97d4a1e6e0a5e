# `cmake --install build/release --prefix P` installs the C++ SDK for outside projects:
#   P/include/shoal/client.h, P/lib/libshoal_client.a (+ libshoal_proto.a, the generated
#   messages it needs), P/lib/cmake/shoal/ (shoalConfig.cmake: find_package(shoal CONFIG)
#   then target_link_libraries(app shoal::client)), and P/bin/shoalctl.
# client.h names no protobuf type, so the generated headers are not installed; the static
# libraries carry their link dependencies (gRPC, protobuf, abseil), which shoalConfig finds.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(shoal_proto PROPERTIES EXPORT_NAME proto)
target_include_directories(shoal_client INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(TARGETS shoal_client shoal_proto EXPORT shoalTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/client.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shoal)
install(TARGETS shoalctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(SHOAL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shoal)
install(EXPORT shoalTargets NAMESPACE shoal:: DESTINATION ${SHOAL_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/shoalConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/shoalConfig.cmake INSTALL_DESTINATION ${SHOAL_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/shoalConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/shoalConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/shoalConfigVersion.cmake DESTINATION ${SHOAL_CMAKE_DIR})
