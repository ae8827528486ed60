// Intentionally empty: this build found no backend sources to compile, so
// the GLFW and OpenGL 3 backends come from Debian's libimgui.a, which
// carries both (imgui_impl_glfw.o, imgui_impl_opengl3.o).
